"""EC2 error codes sorted into what slurmscale does about them.

Capacity: the offering is unavailable for a while (a TTL that grows with repeats); try
elsewhere. Quota: an account limit, retrying does not help soon. Throttle: retried by botocore
with backoff, never a capacity error. Config/permission: nothing will work until an admin
acts; surfaced loudly. Transient: the endpoint unreachable, timing out or failing inside
(botocore already retried it): the request is kept and retried later, nothing is rolled back
on an answer that never came."""

from __future__ import annotations

from enum import StrEnum


class ErrorClass(StrEnum):
    CAPACITY = "capacity"
    QUOTA = "quota"
    THROTTLE = "throttle"
    CONFIG = "config"
    TRANSIENT = "transient"
    OTHER = "other"


CAPACITY_CODES = frozenset({
    "InsufficientInstanceCapacity", "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity", "InsufficientCapacity",
    "MaxSpotInstanceCountExceeded", "SpotMaxPriceTooLow", "Unsupported",
    "InsufficientFreeAddressesInSubnet", "PartialCapacity",
})
QUOTA_CODES = frozenset({
    "VcpuLimitExceeded", "InstanceLimitExceeded", "MaxFleetCountExceeded",
    "MaxTargetCapacityExceeded", "TargetCapacityLimitExceededException",
})
THROTTLE_CODES = frozenset({
    "RequestLimitExceeded", "Throttling", "ThrottlingException", "RequestThrottled",
    "TooManyRequestsException", "EC2ThrottledException",
})
# botocore's transport failures (their class names are the codes) and AWS's 5xx codes
TRANSIENT_CODES = frozenset({
    "EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError",
    "ConnectionClosedError", "ProxyConnectionError", "HTTPClientError", "SSLError",
    "InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable",
})
CONFIG_CODES = frozenset({
    "UnauthorizedOperation", "AuthFailure", "AccessDenied", "InvalidParameterValue",
    "InvalidParameterCombination", "InvalidLaunchTemplateName.NotFoundException",
    "InvalidLaunchTemplateId.NotFound", "InvalidLaunchTemplateId.VersionNotFound",
    "InvalidSubnetID.NotFound", "InvalidAMIID.NotFound", "OptInRequired",
    "Blocked", "PendingVerification", "InvalidFleetConfiguration",
})


def classify(code: str) -> ErrorClass:
    if code in CAPACITY_CODES:
        return ErrorClass.CAPACITY
    if code in QUOTA_CODES:
        return ErrorClass.QUOTA
    if code in THROTTLE_CODES:
        return ErrorClass.THROTTLE
    if code in TRANSIENT_CODES:
        return ErrorClass.TRANSIENT
    if code in CONFIG_CODES or code.startswith(("Invalid", "Unauthorized")):
        return ErrorClass.CONFIG
    return ErrorClass.OTHER


def is_transient(code: str) -> bool:
    """Worth asking again soon: throttling that outlasted botocore's retries, or no answer."""
    return classify(code) in (ErrorClass.THROTTLE, ErrorClass.TRANSIENT)


def unavailable_ttl(repeats: int, base_s: float, cap_s: float) -> float:
    """3 min, 6, 12, 24, then 30: each capacity error in a row doubles the wait."""
    return min(cap_s, base_s * 2 ** max(0, repeats - 1))
