"""Errors a service raises; the API layer turns each into its AWS error code."""

from __future__ import annotations


class ServiceError(Exception):
    code = "InternalFailure"
    status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ValidationException(ServiceError):
    code = "ValidationException"


class ResourceNotFound(ServiceError):
    code = "ResourceNotFound"


class ResourceInUse(ServiceError):
    code = "ResourceInUse"


class ResourceLimitExceeded(ServiceError):
    code = "ResourceLimitExceeded"


class ConflictException(ServiceError):
    code = "ConflictException"


class AccessDeniedException(ServiceError):
    code = "AccessDeniedException"


# Service Quotas' own error codes (its model names these, not SageMaker's).
class NoSuchResourceException(ServiceError):
    code = "NoSuchResourceException"


class IllegalArgumentException(ServiceError):
    code = "IllegalArgumentException"


class ResourceAlreadyExistsException(ServiceError):
    code = "ResourceAlreadyExistsException"


class InvalidPaginationTokenException(ServiceError):
    code = "InvalidPaginationTokenException"


# ECR's own error codes (its model names these).
class InvalidParameterException(ServiceError):
    code = "InvalidParameterException"


class InvalidTagParameterException(ServiceError):
    code = "InvalidTagParameterException"


class TooManyTagsException(ServiceError):
    code = "TooManyTagsException"


class RepositoryAlreadyExistsException(ServiceError):
    code = "RepositoryAlreadyExistsException"


class RepositoryNotFoundException(ServiceError):
    code = "RepositoryNotFoundException"
