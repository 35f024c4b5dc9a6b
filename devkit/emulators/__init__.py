"""Local Firestore, Pub/Sub, Cloud Storage and Firebase Auth emulators for codedrop
(`python -m devkit.emulators`)."""

from devkit.emulators.manager import (
    EmulatorFailed,
    EmulatorStack,
    EmulatorUnavailable,
    RunningEmulator,
    check_auth_prerequisites,
    check_prerequisites,
    find_sdk_root,
    free_port,
    reset_auth,
    reset_firestore,
    reset_pubsub,
    start_auth,
    start_firestore,
    start_pubsub,
    start_storage,
    wait_ready,
)

__all__ = [
    "EmulatorFailed",
    "EmulatorStack",
    "EmulatorUnavailable",
    "RunningEmulator",
    "check_auth_prerequisites",
    "check_prerequisites",
    "find_sdk_root",
    "free_port",
    "reset_auth",
    "reset_firestore",
    "reset_pubsub",
    "start_auth",
    "start_firestore",
    "start_pubsub",
    "start_storage",
    "wait_ready",
]
