"""The spawned side of isolation: channel (pipe, marks, arming), calls and pytest_mode (the
two serving modes), main (the spawn target). Nothing here imports the parent's watchdog."""
