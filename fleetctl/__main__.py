from fleetctl.cli.main import main

main()
