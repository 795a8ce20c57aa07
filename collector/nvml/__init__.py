"""Reading the GPUs: every NVML call, per device and field, with the state kept between cycles."""
