"""`python -m faultplane.mcp_server [options]`: the same as `faultplane mcp [options]`."""

from faultplane.cli.mcp import app

if __name__ == "__main__":
    app(prog_name="faultplane mcp")
