"""What an application calls: enqueue one job or many, wait for results, cancel."""
