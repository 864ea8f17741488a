"""Which database failures are "the database is not reachable" (503 ``unavailable``) and which
are a statement's own mistakes (left as they are). The real path, PostgreSQL stopped under
running replicas: ``tests/cluster/test_replica_faults.py``."""

from __future__ import annotations

import pytest
from asyncpg.exceptions import CannotConnectNowError, ConnectionDoesNotExistError
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError, ProgrammingError

from server.db.base import unreachable

pytestmark = pytest.mark.unit


def _wrapped(orig: BaseException, kind: type[DBAPIError] = DBAPIError) -> DBAPIError:
    return kind("SELECT 1", {}, orig)


def _caused(err: BaseException, cause: BaseException) -> BaseException:
    err.__cause__ = cause
    return err


@pytest.mark.parametrize(
    "err",
    [
        ConnectionRefusedError(111, "Connection refused"),
        _wrapped(CannotConnectNowError("the database system is shutting down")),
        _wrapped(ConnectionDoesNotExistError("connection was closed")),
        _wrapped(Exception("server closed the connection"), OperationalError),
        _caused(RuntimeError("pool checkout"), ConnectionResetError(104, "reset")),
    ],
)
def test_a_database_that_went_away_is_unreachable(err: BaseException) -> None:
    assert unreachable(err)


@pytest.mark.parametrize(
    "err",
    [
        _wrapped(Exception("duplicate key value"), IntegrityError),
        _wrapped(Exception("syntax error at or near"), ProgrammingError),
        ValueError("a bug of ours"),
    ],
)
def test_a_statements_own_error_is_not_an_outage(err: BaseException) -> None:
    assert not unreachable(err)
