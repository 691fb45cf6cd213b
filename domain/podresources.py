"""kubelet PodResources v1 ``ListPodResourcesResponse`` (proto3 JSON) -> device holders.

PodResources names pods by namespace + name, never by UID: the UID valid at the
snapshot's time is resolved later from the watch stream.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DeviceHolder", "PodResourcesError", "device_holders"]


class PodResourcesError(ValueError):
    """The response does not have the ListPodResourcesResponse shape."""


@dataclass(frozen=True)
class DeviceHolder:
    namespace: str
    pod: str
    container: str
    resource: str


def _get(obj: dict, camel: str, snake: str, default=None):
    return obj.get(camel, obj.get(snake, default))


def device_holders(response: dict) -> dict[str, DeviceHolder]:
    """Every device id in the snapshot -> who holds it (DRA claims are not devices here)."""
    if not isinstance(response, dict):
        raise PodResourcesError("response must be a JSON object")
    pods = _get(response, "podResources", "pod_resources", [])
    if not isinstance(pods, list):
        raise PodResourcesError("podResources must be a list")
    holders: dict[str, DeviceHolder] = {}
    for i, pod in enumerate(pods):
        if not isinstance(pod, dict) or "name" not in pod or "namespace" not in pod:
            raise PodResourcesError(f"podResources[{i}] needs name and namespace")
        for container in pod.get("containers") or []:
            for dev in container.get("devices") or []:
                resource = _get(dev, "resourceName", "resource_name", "")
                for device_id in _get(dev, "deviceIds", "device_ids", []) or []:
                    holders[str(device_id)] = DeviceHolder(pod["namespace"], pod["name"],
                                                           container.get("name", ""), resource)
    return holders
