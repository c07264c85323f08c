"""Example agent specs (receptionist.yaml, order_status.yaml) and the demo order API."""
