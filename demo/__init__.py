"""The main job: the whole chain on one machine, GPU load to autoscaling decision, with stand-ins for Kubernetes."""
