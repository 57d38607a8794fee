"""What the host tells its operator about itself (issue 13 items 4–6): structured host logs that
name the instance (``logs``), Prometheus metrics (``metrics``) and optional OpenTelemetry traces
(``tracing``). Each is cheap when off and never reaches tenant code (the sandbox child imports none
of them)."""
