// What firebase-tools (the pinned one in node_modules) makes of firestore.indexes.json before a
// `firebase deploy --only firestore`: its own validation, then what it would deploy, as JSON.
// Run by tests/tools/test_deploy_firestore.py: node firebase_indexes.cjs REPO INDEXES_FILE
const fs = require("fs");
const path = require("path");

const [repo, file] = process.argv.slice(2);
const { FirestoreApi } = require(path.join(repo, "node_modules/firebase-tools/lib/firestore/api"));
const api = new FirestoreApi();
const config = JSON.parse(fs.readFileSync(file, "utf8"));
const spec = api.upgradeOldSpec({ indexes: config.indexes, fieldOverrides: config.fieldOverrides });
api.validateSpec(spec);
process.stdout.write(JSON.stringify(spec));
