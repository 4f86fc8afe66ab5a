from fleetctl.cli.entry import main

main()
