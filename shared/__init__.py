"""codedrop's domain logic, models and storage code, shared by every function."""
