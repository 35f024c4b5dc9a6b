"""The Cloud Functions entry points (main.py); deployed as the staged folder's main.py."""
