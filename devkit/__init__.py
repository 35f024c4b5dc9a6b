"""The dev kit: everything that runs codedrop on this machine and checks it, and that production
never imports. Emulators and their process groups (`emulators`), stand-ins for the Google services
the emulators lack (`standins`: Storage notifications, Cloud Scheduler, App Check keys), the
Firestore RPC counter and index checker, the invariant audit, and fixtures that write codes and
claims directly. Layers: `shared` <- `devkit` <- `scripts` <- `tests` (.importlinter)."""
