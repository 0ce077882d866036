"""The expectation suites (GX 1.x built-in expectations), built from the validation config.

Cross-row and cross-table rules expect on the derived columns from `derive.py`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import great_expectations as gx
import great_expectations.expectations as gxe

from components.config import ValidationConfig
from components.validation.derive import ID_OVERLAP, MISSING_SUPPORT, N_ANSWERS, SPLIT_OVERLAP

BLANK = r"^\s*$"


@dataclass(frozen=True)
class SuiteSpec:
    name: str
    index_columns: list[str]  # identify the example rows in results and messages
    expectations: list[gxe.Expectation]

    def suite(self) -> gx.ExpectationSuite:
        # copies: a GX expectation belongs to one suite, and a spec may build suites in several contexts
        return gx.ExpectationSuite(name=self.name, expectations=[copy.copy(e) for e in self.expectations])


def questions_suite(v: ValidationConfig) -> SuiteSpec:
    return SuiteSpec(
        "questions",
        ["id"],
        [
            gxe.ExpectTableRowCountToBeBetween(min_value=1),
            gxe.ExpectColumnValuesToNotBeNull(column="id"),
            gxe.ExpectColumnValuesToBeUnique(column="id"),
            gxe.ExpectColumnValuesToNotBeNull(column="question"),
            gxe.ExpectColumnValuesToNotMatchRegex(column="question", regex=BLANK),
            gxe.ExpectColumnValueLengthsToBeBetween(
                column="question", min_value=v.question_min_chars, max_value=v.question_max_chars
            ),
            gxe.ExpectColumnValuesToBeBetween(column=N_ANSWERS, min_value=1, notes="Every question has an answer."),
            gxe.ExpectColumnValuesToBeInSet(column="split", value_set=list(v.allowed_splits)),
            gxe.ExpectColumnValuesToNotBeNull(column="dataset"),
            gxe.ExpectColumnValuesToNotBeNull(column="corpus"),
            gxe.ExpectColumnValuesToBeNull(
                column=MISSING_SUPPORT,
                notes="Every supporting passage id exists in the question's corpus; the value lists the missing ids.",
            ),
            gxe.ExpectColumnValuesToBeNull(
                column=SPLIT_OVERLAP,
                notes=f"No normalised question text is in both train and {'/'.join(v.eval_splits)}; "
                "the value names the other split and the id of its twin.",
            ),
            gxe.ExpectColumnValuesToBeNull(
                column=ID_OVERLAP,
                notes=f"No source question id (the id after '<dataset>:') is in both train and {'/'.join(v.eval_splits)}; "
                "the value names the other split and the id of its twin.",
            ),
        ],
    )


def answers_suite(v: ValidationConfig) -> SuiteSpec:
    return SuiteSpec(
        "answers",
        ["question_id"],
        [
            gxe.ExpectColumnValuesToNotMatchRegex(column="answer", regex=BLANK),
            gxe.ExpectColumnValueLengthsToBeBetween(column="answer", min_value=1, max_value=v.answer_max_chars),
        ],
    )


def passages_suite(v: ValidationConfig) -> SuiteSpec:
    return SuiteSpec(
        "passages",
        ["corpus", "id"],
        [
            gxe.ExpectColumnValuesToNotBeNull(column="id"),
            gxe.ExpectCompoundColumnsToBeUnique(column_list=["corpus", "id"]),
            gxe.ExpectColumnValuesToNotBeNull(column="corpus"),
            gxe.ExpectColumnValuesToNotBeNull(column="title"),
            gxe.ExpectColumnValuesToNotBeNull(column="text"),
            gxe.ExpectColumnValueLengthsToBeBetween(
                column="text", min_value=v.passage_min_chars, max_value=v.passage_max_chars
            ),
        ],
    )


def all_suites(v: ValidationConfig) -> list[SuiteSpec]:
    return [questions_suite(v), answers_suite(v), passages_suite(v)]
