"""The kubelet's DRA side: the kubelet plugin (registration, NodePrepareResources) and claims."""
