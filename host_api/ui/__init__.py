"""The web console (docs/spec/host-features.md#hf-console): server-rendered pages at ``/ui/`` (``views``), the sign-in cookie
and CSRF check (``session``), the instance timeline chart (``timeline``, pure), text for people
(``where``, pure) and the logs panels (``logs``). Templates and the small script and style sheet
ship with the package (``templates/``, ``static/``): no CDN, no build step."""
