"""What the sources' own records say about their versions (domain/source_versions.py)."""

from gpuledger.domain.ledger import content_hash
from gpuledger.domain.source_versions import NOT_IN_EVIDENCE, exposition_versions, versions_document


def test_driver_and_model_labels_are_read_from_series_not_from_comments():
    text = ('# HELP DCGM_FI_DEV_SM_CLOCK modelName="not-a-series"\n'
            'DCGM_FI_DEV_SM_CLOCK{gpu="0",modelName="NVIDIA A100-SXM4-40GB",DCGM_FI_DRIVER_VERSION="535.1"} 1410\n'
            'DCGM_FI_DEV_SM_CLOCK{gpu="1",modelName="NVIDIA H100 80GB HBM3",DCGM_FI_DRIVER_VERSION=""} 1980\n'
            'DCGM_FI_DEV_FB_USED 12\n')
    assert exposition_versions(text) == {"nvidia_driver": {"535.1"},
                                         "gpu_model": {"NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3"}}


def test_the_document_lists_revisions_and_what_the_sources_do_not_say():
    doc = versions_document({"nvidia_driver": {"580.2", "580.1"}}, [("llama", "r2"), ("llama", "r1"), ("qwen", "")],
                            "how")
    assert doc == {"nvidia_driver": ["580.1", "580.2"], "model_revisions": ["llama@r1", "llama@r2", "qwen"],
                   "read": "how", "not_in_evidence": NOT_IN_EVIDENCE}


def test_versions_are_not_part_of_the_evidence_hash():
    base = {"period": "2026-10", "lines": []}
    assert content_hash(base) == content_hash({**base, "source_versions": {"nvidia_driver": ["1"]}})
