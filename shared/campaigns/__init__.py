"""Campaigns: their settings, window and status, stored in `campaigns/{id}`, and the views the
two APIs return."""
