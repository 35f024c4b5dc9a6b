"""The waiting room: signed first-attempt tickets and fair admission at a set rate."""
