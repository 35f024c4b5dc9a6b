"""Local Firestore, Pub/Sub and Cloud Storage emulators for codedrop (`python -m emulator`)."""

from emulator.manager import (
    EmulatorFailed,
    EmulatorStack,
    EmulatorUnavailable,
    RunningEmulator,
    check_prerequisites,
    find_sdk_root,
    free_port,
    reset_firestore,
    reset_pubsub,
    start_firestore,
    start_pubsub,
    start_storage,
)

__all__ = [
    "EmulatorFailed",
    "EmulatorStack",
    "EmulatorUnavailable",
    "RunningEmulator",
    "check_prerequisites",
    "find_sdk_root",
    "free_port",
    "reset_firestore",
    "reset_pubsub",
    "start_firestore",
    "start_pubsub",
    "start_storage",
]
