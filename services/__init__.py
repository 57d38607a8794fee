"""Rules shared by the API and the workers: one service module per concept."""
