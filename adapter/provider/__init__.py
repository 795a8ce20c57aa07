"""The answers: discovery and relist, custom, external and resource metric values, explain."""
