"""Stand-ins for Google services the emulators do not provide: Cloud Storage's object-finalized
notifications, Cloud Scheduler's calls of the sweep, and App Check's signing keys."""
