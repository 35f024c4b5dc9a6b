"""Campaign events delivered to the businesses that run the sales: signed, retried, throttled
per endpoint, and kept from reaching private addresses."""
