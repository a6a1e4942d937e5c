"""Command-line helpers shared by the controller, the simulator, the workers and the scripts."""
