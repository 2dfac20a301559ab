from pgfleet.cli import main

main()
