"""The supervisor of one host (`pgfleet run`): the arbiter (arbiter.py) and what it
shares with its children (beacons, the rescue pipe, exit codes). Nothing is imported
here, so a child that needs exit_codes or beacon never loads the arbiter."""
