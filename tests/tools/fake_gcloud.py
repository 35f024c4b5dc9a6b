"""A stand-in for gcloud, firebase-tools (through npx) and curl, for the deploy plan's tests.

It keeps a small world in a JSON file (what exists, with its settings, and the IAM bindings),
answers describes from it, and answers a create of something that exists, or a binding of a
service agent not created yet, with the text the real service gives (recorded_answers.json).
Faults injected by the test replay what a new project answers while it settles (an agent not
ready, Firestore's admin contention, concurrent IAM changes) a given number of times.

Run as `python fake_gcloud.py TOOL ARGS...` by the wrappers the tests put on PATH; the world is
the file named by FAKE_GCLOUD_WORLD. Every call is logged there, in order.
"""

from __future__ import annotations

import json
import os
import re
import sys
import zlib

# A process per call, some 150 a plan: only modules that load fast (pathlib, typing and hashlib
# took a third of each call's CPU). `Any` is for mypy alone.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _read(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()


def _digest(data: bytes) -> str:
    """Tells one content from another in the world (what was deployed), nothing more."""
    return f"{zlib.crc32(data):08x}"


ANSWERS = json.loads(_read(os.path.join(os.path.dirname(__file__), "recorded_answers.json")))
NUMBER = "123456789012"
VERBS = (
    "create",
    "describe",
    "update",
    "deploy",
    "add",
    "list",
    "enable",
    "add-iam-policy-binding",
    "add-invoker-policy-binding",
    "service-agent",
    "print-access-token",
)
ALREADY = {
    "storage/buckets": "bucket_you_already_own",
    "pubsub/topics": "topic_already_exists",
    "pubsub/subscriptions": "subscription_already_exists",
    "iam/service-accounts": "service_account_already_exists",
    "secrets": "secret_already_exists",
    "firestore/databases": "database_already_exists",
    "scheduler/jobs": "job_already_exists",
}
STORAGE_AGENT = f"service-{NUMBER}@gs-project-accounts.iam.gserviceaccount.com"
# What describes print with --format=value(...) (only the fields the plan asks for).
URI = "https://{name}-x7k2m4qv3a-ew.a.run.app"

Answer = tuple[int, str, str]


def _answer(key: str, **fields: str) -> Answer:
    recorded = ANSWERS[key]
    stderr = recorded["stderr"]
    for field, value in fields.items():
        stderr = stderr.replace("{" + field + "}", value)
    return recorded["exit"], "", stderr


def _flags(args: list[str]) -> dict[str, list[str]]:
    flags: dict[str, list[str]] = {}
    for arg in args:
        if arg.startswith("--"):
            key, _, value = arg.partition("=")
            flags.setdefault(key, []).append(value)
    return flags


def _setting(args: list[str]) -> list[str]:
    """A resource's settings: its flags but the ones that only address it."""
    return sorted(
        a for a in args if a.startswith("--") and not a.startswith(("--project", "--format"))
    )


class World:
    def __init__(self, path: str) -> None:
        self.path = path
        self.state: dict[str, Any] = json.loads(_read(path))
        self.project = self.state["project"]

    def save(self) -> None:
        with open(self.path, "w") as file:
            json.dump(self.state, file, indent=1, sort_keys=True)

    @property
    def resources(self) -> dict[str, Any]:
        return self.state["resources"]  # type: ignore[no-any-return]

    def fault(self, line: str) -> Answer | None:
        for fault in self.state["faults"]:
            if fault["times"] > 0 and re.search(fault["match"], line):
                fault["times"] -= 1
                name = fault.get("name", "")
                return _answer(fault["answer"], project=self.project, name=name, command="x")
        return None

    # --- gcloud ---------------------------------------------------------------------------
    def gcloud(self, args: list[str]) -> Answer:
        words = [a for a in args if not a.startswith("-")]
        if words[0] == "alpha":  # the release track changes nothing here
            words = words[1:]
        if words[:1] == ["monitoring"]:
            return self._monitoring(words[1], words[2], words[3:], _flags(args))
        verb_at = next(i for i, w in enumerate(words) if w in VERBS)
        kind, verb = "/".join(words[:verb_at]), words[verb_at]
        rest = [w for w in words[verb_at + 1 :] if w != "http"]
        name = rest[0] if rest else "(default)"
        if kind == "iam/service-accounts" and verb in ("create", "describe"):
            name = name.split("@")[0]
        fixed = {
            ("auth", "print-access-token"): "fake-token",
            ("projects", "describe"): NUMBER,
            ("services", "enable"): "",
        }
        if (kind, verb) in fixed:
            return 0, fixed[kind, verb] + "\n" * bool(fixed[kind, verb]), ""
        if (kind, verb) == ("storage", "service-agent"):
            self.resources["storage-agent"] = STORAGE_AGENT
            return 0, STORAGE_AGENT + "\n", ""
        if verb in ("add-iam-policy-binding", "add-invoker-policy-binding"):
            return self._bind(kind, name, _flags(args))
        if kind == "secrets/versions":
            return self._versions(verb, name)
        if (kind, verb) == ("pubsub/subscriptions", "list"):
            # The deploy's probe for a push subscription made without its message filter (one
            # older than the filter): a project the deploy set up has none.
            return 0, "", ""
        if (kind, verb) == ("storage/buckets", "update"):
            # A bucket's CORS, by what the file says (the file is the deployer's own copy).
            cors = _read(_flags(args)["--cors-file"][0])
            self.resources[f"{kind}:{name}:cors"] = _digest(cors)
            return 0, "", ""
        if (kind, verb) == ("firestore/indexes/composite", "list"):
            # firebase deploy started the builds; they are READY unless a fault says otherwise.
            built = "firestore:rules+indexes" in self.resources
            return 0, "READY\nREADY\n" if built else "", ""
        return self._resource(kind, verb, name, args)

    def _monitoring(
        self, kind: str, verb: str, rest: list[str], flags: dict[str, list[str]]
    ) -> Answer:
        """Dashboards and alert policies: a create always adds one (the API takes two of one
        display name), a list finds them by display name, an update replaces one by name."""
        made: dict[str, Any] = self.resources.setdefault(f"monitoring/{kind}", {})
        files = flags.get("--config-from-file") or flags.get("--policy-from-file") or [""]
        if verb == "list":
            wanted = re.fullmatch(r'displayName="(.*)"', flags["--filter"][0])
            assert wanted, flags
            names = [n for n, item in made.items() if item["displayName"] == wanted[1]]
            return 0, "".join(f"{n}\n" for n in names[:1]), ""
        content = _read(files[0])
        item = {"displayName": json.loads(content)["displayName"], "file": _digest(content)}
        if verb == "create":
            made[f"projects/{NUMBER}/{kind}/{len(made) + 1}"] = item
            return 0, "", ""
        if verb == "update" and rest and rest[0] in made:
            made[rest[0]] = item
            return 0, "", ""
        return _answer("not_found", name=rest[0] if rest else "", command=f"monitoring.{kind}")

    def _bind(self, kind: str, name: str, flags: dict[str, list[str]]) -> Answer:
        member = flags["--member"][0]
        agent = f"serviceAccount:{STORAGE_AGENT}"
        if member == agent and "storage-agent" not in self.resources:
            return _answer("service_account_does_not_exist", name=STORAGE_AGENT)
        role = (flags.get("--role") or ["roles/run.invoker"])[0]
        binding = [kind, name, member, role]
        if binding not in self.state["bindings"]:
            self.state["bindings"].append(binding)
        return 0, "", ""

    def _versions(self, verb: str, name: str) -> Answer:
        versions = self.resources.get(f"secrets:{name}:versions", 0)
        if verb == "list":
            listed = f"projects/{NUMBER}/secrets/{name}/versions/{versions}\n"
            return 0, listed if versions else "", ""
        self.resources[f"secrets:{name}:versions"] = versions + 1
        return 0, "", ""

    def _resource(self, kind: str, verb: str, name: str, args: list[str]) -> Answer:
        key = f"{kind}:{name}"
        if verb == "describe":
            if key not in self.resources:
                command = f"{kind.replace('/', '.')}.describe"
                return _answer("not_found", name=name, command=command)
            if kind != "functions":
                return 0, name + "\n", ""
            if "--format=value(serviceConfig.minInstanceCount)" in args:
                return 0, _flags(self.resources[key])["--min-instances"][0] + "\n", ""
            return 0, URI.format(name=name) + "\n", ""
        if verb == "create" and key in self.resources:
            return _answer(ALREADY[kind], project=self.project, name=name)
        if verb in ("create", "update", "deploy"):
            self.resources[key] = _setting(args)
            return 0, "", ""
        raise SystemExit(f"fake gcloud: no answer recorded for {args}")

    # --- firebase-tools -------------------------------------------------------------------
    def firebase(self, args: list[str]) -> Answer:
        if args[0] == "projects:addfirebase":
            self.resources[f"firebase:{args[1]}"] = True
            return 0, "", ""
        if args[:3] == ["apps:create", "WEB", "codedrop"]:
            self.resources["firebase:webapp"] = {"appId": "1:123456789012:web:abc"}
            return 0, "", ""
        if args[:2] == ["apps:sdkconfig", "WEB"]:
            config = {"projectId": self.project, "appId": "1:123456789012:web:abc"}
            config |= {"apiKey": "AIza-fake", "authDomain": f"{self.project}.firebaseapp.com"}
            return 0, json.dumps(config, indent=2) + "\n", ""
        if args[:3] == ["deploy", "--only", "hosting"]:
            public = args[args.index("--public") + 1]
            self.resources["hosting"] = {
                os.path.relpath(path, public): _digest(_read(path))
                for path in sorted(
                    os.path.join(folder, name)
                    for folder, _, names in os.walk(public)
                    for name in names
                )
            }
            return 0, "", ""
        if args[:3] == ["deploy", "--only", "firestore"]:
            config = json.loads(_read("firebase.json"))["firestore"]
            content = b"".join(_read(file) for file in (config["rules"], config["indexes"]))
            self.resources["firestore:rules+indexes"] = _digest(content)
            return 0, "", ""
        raise SystemExit(f"fake firebase: no answer recorded for {args}")

    # --- curl -----------------------------------------------------------------------------
    def curl(self, args: list[str]) -> Answer:
        url = args[-1]
        match = re.fullmatch(
            r"https://firebase\.googleapis\.com/v1beta1/projects/([a-z0-9-]+)", url
        )
        if "identitytoolkit.googleapis.com" in url:
            body = json.loads(args[args.index("-d") + 1])
            self.resources["auth:config"] = {"url": url, "body": body}
            return 0, "{}\n", ""
        if url.endswith("/webApps"):
            app = self.resources.get("firebase:webapp")
            return 0, json.dumps({"apps": [app]} if app else {}) + "\n", ""
        if match:
            if f"firebase:{match[1]}" in self.resources:
                return 0, json.dumps({"projectId": match[1], "state": "ACTIVE"}) + "\n", ""
            return _answer("curl_not_found")
        raise SystemExit(f"fake curl: no answer recorded for {args}")


def main(argv: list[str]) -> int:
    tool, args = argv[0], argv[1:]
    world = World(os.environ["FAKE_GCLOUD_WORLD"])
    line = " ".join([tool, *args])
    world.state["calls"].append(line)
    if tool == "npx":
        assert args[:2] == ["--no-install", "firebase"], args
        tool, args = "firebase", args[2:]
    answer = world.fault(line) or getattr(world, tool)(args)
    world.save()
    code, stdout, stderr = answer
    sys.stdout.write(stdout)
    sys.stderr.write(stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
