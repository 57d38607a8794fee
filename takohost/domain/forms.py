"""The Forms this host serves, by short name and exact URL (pure data, no I/O).

The API (``services.forms``) accepts a resource's ``form`` as one of these URLs or short names;
the CLI (``host_cli.client``) writes the URLs into the resources it creates. One table for both
(docs: docs/http-api.md "In one screen").
"""

from __future__ import annotations

#: Short Form name → the exact Form URL (version included) this host implements.
FORM_URLS: dict[str, str] = {
    "ModuleWorker": "https://edge.forms.takoform.com/forms/ModuleWorker/0.3.0/",
    "WorkerVersion": "https://edge.forms.takoform.com/forms/WorkerVersion/0.5.0/",
    "WorkerDeployment": "https://edge.forms.takoform.com/forms/WorkerDeployment/0.4.0/",
    "DurableWorkflow": "https://edge.forms.takoform.com/forms/DurableWorkflow/0.3.0/",
    "WorkerCronTrigger": "https://edge.forms.takoform.com/forms/WorkerCronTrigger/0.3.0/",
}
