"""Google Cloud access: the Firestore client and every collection path, Storage, Pub/Sub."""
