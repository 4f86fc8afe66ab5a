from fleetctl.cli.main import app

app(prog_name="fleetctl")
