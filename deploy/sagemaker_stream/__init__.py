"""``--model-url sagemaker://ENDPOINT``: the call tier's model streams on SageMaker endpoints.

    targets.py   sagemaker:// URLs (standard library: read by both interpreters)
    launcher.py  the call server's side: start the bridge process in .venv-aws, restart it if it dies
    bridge.py    the bridge (Python 3.12): loopback WebSocket <-> InvokeEndpointWithBidirectionalStream

Nothing is imported here: ``bridge`` needs AWS's HTTP/2 client, which only .venv-aws has.
"""
