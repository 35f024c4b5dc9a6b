"""Checks deploy/monitoring's JSON against the Monitoring API's message definitions that ship
with the Cloud SDK (the ones gcloud sends): prints every field the API does not know, one per
line. Run by tests/tools/test_deploy_monitoring.py with the SDK's own Python:

    <sdk python> monitoring_schema.py SDK_ROOT dashboard.json alert-*.json
"""

import sys
from typing import Any


def main(sdk_root: str, dashboard: str, policies: list[str]) -> None:
    sys.path[:0] = [f"{sdk_root}/lib", f"{sdk_root}/lib/third_party"]
    # The SDK's own modules, on the path just set (the SDK's Python runs this, not .venv's).
    from apitools.base.protorpclite import messages  # type: ignore[import-not-found]
    from apitools.base.py import encoding  # type: ignore[import-not-found]
    from googlecloudsdk.generated_clients.apis.monitoring.v1 import (  # type: ignore[import-not-found]
        monitoring_v1_messages as v1,
    )
    from googlecloudsdk.generated_clients.apis.monitoring.v3 import (  # type: ignore[import-not-found]
        monitoring_v3_messages as v3,
    )

    def unknown(message: Any, path: str) -> list[str]:
        found: list[str] = [f"{path}.{name}" for name in message.all_unrecognized_fields()]
        for field in message.all_fields():
            value = message.get_assigned_value(field.name)
            if isinstance(field, messages.MessageField) and value is not None:
                for n, item in enumerate(value if field.repeated else [value]):
                    found += unknown(item, f"{path}.{field.name}[{n}]")
        return found

    with open(dashboard) as file:
        problems = unknown(encoding.JsonToMessage(v1.Dashboard, file.read()), dashboard)
    for policy in policies:
        with open(policy) as file:
            problems += unknown(encoding.JsonToMessage(v3.AlertPolicy, file.read()), policy)
    sys.stdout.write("".join(f"{problem}\n" for problem in problems))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
