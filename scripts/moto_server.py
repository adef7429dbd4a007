"""moto's server, with DynamoDB calls taken one at a time.

Real DynamoDB evaluates each conditional write atomically. moto's server is threaded and its
DynamoDB backend checks a condition and then writes without a lock, so two racing conditional
writes can both pass. Taking DynamoDB calls one at a time restores DynamoDB's guarantee, which
the tests of "a turn delivered twice runs once" depend on. Other services (SQS long polls) stay
concurrent.

Usage: python scripts/moto_server.py -H 127.0.0.1 -p 5000
"""

import argparse
import threading

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import run_simple


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=5000)
    args = parser.parse_args()

    app = DomainDispatcherApplication(create_backend_app)
    dynamodb = threading.Lock()

    def serialized(environ, start_response):
        if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_"):
            with dynamodb:
                return list(app(environ, start_response))
        return app(environ, start_response)

    run_simple(args.host, args.port, serialized, threaded=True, use_reloader=False)


if __name__ == "__main__":
    main()
