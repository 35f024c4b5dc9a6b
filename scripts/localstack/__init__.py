"""The local stack behind ./scripts/run (`python -m scripts.localstack`): the emulators plus every
function of functions/main.py on fixed ports, until stopped.

config (ports, functions, variables), functions (functions-framework servers), resources
(topics and subscriptions), storage_notifier (the object-finalized events the Storage emulator
does not send), stack (start, supervise, stop), demo (--demo, --check), output (what it prints).
"""
