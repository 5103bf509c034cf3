"""Outgoing webhooks over HTTP: the SSRF guard (``guard``), Standard Webhooks signatures
(``signing``) and the sender the core's ``DeliveryWorker`` calls (``sender``)."""
