"""Serves openenv_guess.GuessEnvironment with openenv-core's own HTTP/WebSocket server."""

import sys

import uvicorn
from openenv.core.env_server.http_server import create_fastapi_app
from openenv_guess import GuessAction, GuessEnvironment, GuessObservation

app = create_fastapi_app(lambda: GuessEnvironment(high=8), GuessAction, GuessObservation)

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="error")
