"""HTTP routes, one blueprint per concept; handlers stay thin (parse, call a service, render)."""
