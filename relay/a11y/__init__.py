"""Accessibility (AT-SPI) for agents: a worker per desktop and the relay's side of it."""
