"""The control room's reads and jobs for admin_api's console: the live view of a sale, exports,
the list of who claimed what."""
