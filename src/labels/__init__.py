"""GPU feature discovery: the node label catalog computed from the device model."""
