"""The audit log: every change an admin makes through admin_api, written in the commit that
makes the change."""
