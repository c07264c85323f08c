"""Deployment: the process entry point (``parley``), and later the SageMaker model server."""
