"""Scheduled maintenance: the sweep Cloud Scheduler calls every minute."""
