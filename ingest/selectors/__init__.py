"""Reads of the ingest app for the layers above, a module for each thing asked.

``clients`` (presence, targets, tokens, a client's activity), ``deliveries``
(a delivery's route, delivery requests counted), ``blocks`` (what a message's
blocks came to), ``guides`` (the tool guide's facts), ``policies`` (which tool
policy applies to a block). The side panel's reads are ``ingest.panel.selectors``,
the chat sites' ``ingest.sites.selectors``.
"""
