"""Every upstream data file trustmh uses: where it comes from (a pinned commit), its size and sha256.

The local layout (`path`) is the one of `shared/data/upstream`; see its MANIFEST.md for schemas, counts,
encodings and licenses. This module is data only: sizes and hashes were computed from that staged copy,
sources and paths in the upstream repositories were taken from MANIFEST.md. `fetch.py` uses it to
download, import and verify.

Two sets are shipped upstream only inside zips in TrustMH_Bench (`privacy.zip`, `Ethics.zip`): their `url`
is the zip and `zip_member` the file inside it. The member paths come from MANIFEST.md (the zips are
binary and could not be listed here), so they are the one part of this file not checked byte for byte.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass


@dataclass(frozen=True)
class DataFile:
    path: str  # relative to the data dir
    size: int
    sha256: str
    url: str  # raw URL at a pinned commit; for zipped files, the zip's URL
    zip_member: str | None = None


@dataclass(frozen=True)
class Dataset:
    name: str
    description: str
    license: str
    source: str  # "owner/repo@commit" (or where a gated set lives)
    files: tuple[DataFile, ...]
    gated: bool = False  # cannot be downloaded for the user; they place `user_files` themselves
    how_to_get: str = ""
    user_files: tuple[str, ...] = ()  # paths or globs relative to the data dir


_DOWNLOADABLE = (
    Dataset(
        name="trustmh",
        description="TrustMH-Bench sets: ESConv_fair, JailbreakMH, PsyHarm, PsyLeak (+control)",
        license="MIT (TrustMH_Bench repo); derived data keeps upstream terms: ESConv_fair from ESConv (CC BY-NC 4.0), PsyLeak from PsyQA (user agreement)",
        source="Qiyuan0130/TrustMH_Bench@94d65dbd125bfc5df64f0530f35fe0f568a13eb7",
        files=(
            DataFile(
                "trustmh/ESConv_fair.json",
                62660,
                "d97d5398c98e7cc6bacb82f45527c3702b030baa734e3c39a24ffa09638b1c6e",
                "https://raw.githubusercontent.com/Qiyuan0130/TrustMH_Bench/94d65dbd125bfc5df64f0530f35fe0f568a13eb7/dataset/ESConv_fair.json",
            ),
            DataFile(
                "trustmh/JailbreakMH.csv",
                298568,
                "ee3d5defc2a6da654dd5e895bad7c30cd45d63824ba4d13c30d20043ee521218",
                "https://raw.githubusercontent.com/Qiyuan0130/TrustMH_Bench/94d65dbd125bfc5df64f0530f35fe0f568a13eb7/dataset/JailbreakMH.csv",
            ),
            DataFile(
                "trustmh/PsyHarm.csv",
                15058,
                "7f1d0d061c24fffd8c85c376e4a438eb3b3e83f0050e799a434f0e933826580b",
                "https://raw.githubusercontent.com/Qiyuan0130/TrustMH_Bench/94d65dbd125bfc5df64f0530f35fe0f568a13eb7/dataset/PsyHarm.csv",
            ),
            DataFile(
                "trustmh/PsyLeak.txt",
                333060,
                "fc0c82d40241ddbfb0d74c1e99706a00f5db24f5840d93e2ec61a96aa22d11fa",
                "https://raw.githubusercontent.com/Qiyuan0130/TrustMH_Bench/94d65dbd125bfc5df64f0530f35fe0f568a13eb7/dataset/PsyLeak.txt",
            ),
            DataFile(
                "trustmh/PsyLeak_control.txt",
                16071,
                "281a18127f519a6944f18e460e032f1f87f090c39555999827056c7ca9fcbf98",
                "https://raw.githubusercontent.com/Qiyuan0130/TrustMH_Bench/94d65dbd125bfc5df64f0530f35fe0f568a13eb7/dataset/PsyLeak_control.txt",
            ),
        ),
    ),
    Dataset(
        name="trustmh-privacy",
        description="privacy tiers as used by TrustMH: tier 1/2a/2b awareness prompts + human labels (= ConfAIde), tier 3 = PsyLeak",
        license="MIT (TrustMH_Bench) + MIT (ConfAIde); tier 3 derived from PsyQA (user agreement)",
        source="Qiyuan0130/TrustMH_Bench@94d65dbd125bfc5df64f0530f35fe0f568a13eb7",
        files=(
            DataFile(
                "trustmh/privacy/tier_1.txt",
                3491,
                "63261cf847efb3f35f359913bea828131298ee04980189ed7d75eae05f76ac58",
                "https://raw.githubusercontent.com/Qiyuan0130/TrustMH_Bench/94d65dbd125bfc5df64f0530f35fe0f568a13eb7/TrustMH_Bench/DimGroup1/General-model/privacy.zip",
                zip_member="privacy/task1/benchmark/tier_1.txt",
            ),
            DataFile(
                "trustmh/privacy/tier_1_labels.txt",
                39,
                "76c0c3b970ca25016ff224bf47910b5b8c89fb106e731cc7f5a3712e63cababb",
                "https://raw.githubusercontent.com/Qiyuan0130/TrustMH_Bench/94d65dbd125bfc5df64f0530f35fe0f568a13eb7/TrustMH_Bench/DimGroup1/General-model/privacy.zip",
                zip_member="privacy/task1/benchmark/tier_1_labels.txt",
            ),
            DataFile(
                "trustmh/privacy/tier_2_labels.txt",
                667,
                "cd573da5a542a4d92f3a81ed5b09b66cc25a6ae0ea656aaaf754af43304bbb34",
                "https://raw.githubusercontent.com/Qiyuan0130/TrustMH_Bench/94d65dbd125bfc5df64f0530f35fe0f568a13eb7/TrustMH_Bench/DimGroup1/General-model/privacy.zip",
                zip_member="privacy/task2/benchmark/tier_2_labels.txt",
            ),
            DataFile(
                "trustmh/privacy/tier_2a.txt",
                41034,
                "a869099fab404cde9dd50f23c20668063021afa8f080e190b348a5a4da14b979",
                "https://raw.githubusercontent.com/Qiyuan0130/TrustMH_Bench/94d65dbd125bfc5df64f0530f35fe0f568a13eb7/TrustMH_Bench/DimGroup1/General-model/privacy.zip",
                zip_member="privacy/task2/benchmark/tier_2a.txt",
            ),
            DataFile(
                "trustmh/privacy/tier_2b.txt",
                78453,
                "8c194006c92816f56a9ee2f6ec3bf09f29bb1a543408ce154096c8c67f72df37",
                "https://raw.githubusercontent.com/Qiyuan0130/TrustMH_Bench/94d65dbd125bfc5df64f0530f35fe0f568a13eb7/TrustMH_Bench/DimGroup1/General-model/privacy.zip",
                zip_member="privacy/task2/benchmark/tier_2b.txt",
            ),
            DataFile(
                "trustmh/privacy/tier_3_control_psyqa_test.txt",
                16071,
                "281a18127f519a6944f18e460e032f1f87f090c39555999827056c7ca9fcbf98",
                "https://raw.githubusercontent.com/Qiyuan0130/TrustMH_Bench/94d65dbd125bfc5df64f0530f35fe0f568a13eb7/TrustMH_Bench/DimGroup1/General-model/privacy.zip",
                zip_member="privacy/task3/benchmark/tier_3_control_psyqa_test.txt",
            ),
            DataFile(
                "trustmh/privacy/tier_3_psyqa_test.txt",
                333060,
                "fc0c82d40241ddbfb0d74c1e99706a00f5db24f5840d93e2ec61a96aa22d11fa",
                "https://raw.githubusercontent.com/Qiyuan0130/TrustMH_Bench/94d65dbd125bfc5df64f0530f35fe0f568a13eb7/TrustMH_Bench/DimGroup1/General-model/privacy.zip",
                zip_member="privacy/task3/benchmark/tier_3_psyqa_test.txt",
            ),
        ),
    ),
    Dataset(
        name="ethicmh",
        description="EthicMH, TrustMH's copy of EthicsMH with a gold option letter (125 items; not valid UTF-8, see MANIFEST)",
        license="not verifiable (upstream: Hugging Face UVSKKR/Ethical-Reasoning-in-Mental-Health-v1)",
        source="Qiyuan0130/TrustMH_Bench@94d65dbd125bfc5df64f0530f35fe0f568a13eb7",
        files=(
            DataFile(
                "trustmh/ethics/EthicMH.csv",
                194255,
                "19f1e0a0862f5404758f1b8a0e7fc5eae9f274e0348aa8fb4ba20c2c3d5d3e16",
                "https://raw.githubusercontent.com/Qiyuan0130/TrustMH_Bench/94d65dbd125bfc5df64f0530f35fe0f568a13eb7/TrustMH_Bench/DimGroup2/Ethics.zip",
                zip_member="Ethics/data/EthicMH.csv",
            ),
        ),
    ),
    Dataset(
        name="usmle-mental",
        description="USMLE-Mental: 727 mental-health MCQs from MedQA (Psy-Eval)",
        license="MIT (Psy-Eval repo); questions from MedQA (MIT)",
        source="KaguraRuri/Psy-Eval@173c6f454001f3494ea1f4f74d83cef65840add0",
        files=(
            DataFile(
                "usmle-mental/USMLE-mental.jsonl",
                861081,
                "42aa114db531214878945fb8bc305ddc1329333ad5c461d55e2ce36185301b78",
                "https://raw.githubusercontent.com/KaguraRuri/Psy-Eval/173c6f454001f3494ea1f4f74d83cef65840add0/datasets/USMLE-mental.jsonl",
            ),
        ),
    ),
    Dataset(
        name="esconv",
        description="ESConv emotional-support dialogues, HF thu-coai/esconv train/valid/test split (third-party re-save; 1300 dialogues)",
        license="CC BY-NC 4.0, academic research use only",
        source="Dantoro/project_therapy@72f2ccd4670a83c00611b90febbdf941be38516d",
        files=(
            DataFile(
                "esconv/test.json",
                881151,
                "44ee8e25a5cd08149c9c114d9ddb4bdbb7c0d2f8d503b41a35a8fb4a7ce68777",
                "https://raw.githubusercontent.com/Dantoro/project_therapy/72f2ccd4670a83c00611b90febbdf941be38516d/datasets/custom_corpus/esconv_data/test.json",
            ),
            DataFile(
                "esconv/train.json",
                4037146,
                "e401fc5010879dfec7bb716caf072706877a6863dc9d775d39c7296d74feb4fc",
                "https://raw.githubusercontent.com/Dantoro/project_therapy/72f2ccd4670a83c00611b90febbdf941be38516d/datasets/custom_corpus/esconv_data/train.json",
            ),
            DataFile(
                "esconv/valid.json",
                865253,
                "4458152869827ed82e2f0f4a0cdc3e6c33b224f03353f9f1b4ed93d24730b531",
                "https://raw.githubusercontent.com/Dantoro/project_therapy/72f2ccd4670a83c00611b90febbdf941be38516d/datasets/custom_corpus/esconv_data/valid.json",
            ),
        ),
    ),
    Dataset(
        name="emobench",
        description="EmoBench emotional understanding (EU), 200 en + 200 zh items",
        license="MIT",
        source="Sahandfer/EmoBench@3b4f84312541f8469e909965e1fff3691ef85c62",
        files=(
            DataFile(
                "emobench/EU.jsonl",
                408503,
                "60140a7617779bdb496cd50dcebaf33037c39c65821ae300a6a24a72fd7c7037",
                "https://raw.githubusercontent.com/Sahandfer/EmoBench/3b4f84312541f8469e909965e1fff3691ef85c62/data/EU.jsonl",
            ),
        ),
    ),
    Dataset(
        name="cpsycoune",
        description="CPsyCounE counselling dialogues, 9 topics x 5 (Chinese)",
        license="CC BY 4.0",
        source="CAS-SIAT-XinHai/CPsyCoun@1954f2e2d01d3b0f568e1673a525a6d3d9a34c03",
        files=(
            DataFile(
                "cpsycoune/Career/1.json",
                1810,
                "ced00203779fda2da550e3762389753b896fef55f8b362866945e8e430c32fff",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Career/1.json",
            ),
            DataFile(
                "cpsycoune/Career/2.json",
                3454,
                "160249b0cc34cbc46c4943537e5e8d7bb68b18403f3490d13094f45134665209",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Career/2.json",
            ),
            DataFile(
                "cpsycoune/Career/3.json",
                3056,
                "8edd8ec87698c045d2322be882839d8a2f5abb99a77f3cb52c87235fd3583753",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Career/3.json",
            ),
            DataFile(
                "cpsycoune/Career/4.json",
                2133,
                "ef39c858ff9c58b931609deedb9d8e9995fd2195006b631ad5cdbed8eeb28ac6",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Career/4.json",
            ),
            DataFile(
                "cpsycoune/Career/5.json",
                2045,
                "2ec28c80d73a15cb555d2b125b026b5167ff38df89d39646e65aaecb8fb34fe8",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Career/5.json",
            ),
            DataFile(
                "cpsycoune/Education/1.json",
                2463,
                "340c18391604ac680125e1236211f3f7f19899f00406539cb61a4f918c20805c",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Education/1.json",
            ),
            DataFile(
                "cpsycoune/Education/2.json",
                1738,
                "1ccd6651d2fbc3a574237d410de6d0a2ed6eb37306a0b35d8ea8e22126a620ca",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Education/2.json",
            ),
            DataFile(
                "cpsycoune/Education/3.json",
                2738,
                "02072b8551abc6715e84a7b4796570c41b8e75e20fb82e9dbe185a1b6b99ed59",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Education/3.json",
            ),
            DataFile(
                "cpsycoune/Education/4.json",
                2481,
                "16688d33a81d3ed3e3f3e75135763e61ef43d265ab6a7db5ea947b29bd961e72",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Education/4.json",
            ),
            DataFile(
                "cpsycoune/Education/5.json",
                2001,
                "024af2a439ac7c8487f426681d4321adbf7bfb6d847b7f16aa58db2788002b1f",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Education/5.json",
            ),
            DataFile(
                "cpsycoune/Emotion&Stress/1.json",
                2733,
                "f5eb16189a9064ae524a0f1c874357de51a0ae1412619c89d1ca037dd9dbf43f",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Emotion%26Stress/1.json",
            ),
            DataFile(
                "cpsycoune/Emotion&Stress/2.json",
                2201,
                "27cc34cdb413c991f6a14c0143f6a7c9b2ccc7ff9de40a25436f4671d0469d5e",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Emotion%26Stress/2.json",
            ),
            DataFile(
                "cpsycoune/Emotion&Stress/3.json",
                2131,
                "ccb5bf4a2e81e78d73f8b7eb2d7fc4b2212fb8aa1a373dd2cbb9812382b650b4",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Emotion%26Stress/3.json",
            ),
            DataFile(
                "cpsycoune/Emotion&Stress/4.json",
                2507,
                "ff50df18d735fcfadfef1d9be216b6db93b07c9ab179861031befa20793a22be",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Emotion%26Stress/4.json",
            ),
            DataFile(
                "cpsycoune/Emotion&Stress/5.json",
                2465,
                "1e9f20b074299dbf968eb86323113382ba52cae1a248b87c7fc3b6a915b67084",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Emotion%26Stress/5.json",
            ),
            DataFile(
                "cpsycoune/Family Relationship/1.json",
                2955,
                "a57c591bfe7afb1a24a331647158990ae247dcb5e3350e9472e8c3356a564923",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Family%20Relationship/1.json",
            ),
            DataFile(
                "cpsycoune/Family Relationship/2.json",
                2180,
                "ef79aabe0db0047c2b1d2321aa77fdb99f85be75adccb0de242cf1023b037554",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Family%20Relationship/2.json",
            ),
            DataFile(
                "cpsycoune/Family Relationship/3.json",
                2056,
                "8badb83f4280b0d2dd538ae650e8ebf75dacd8c5d818ca5a5a6c0dbd57ffbb45",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Family%20Relationship/3.json",
            ),
            DataFile(
                "cpsycoune/Family Relationship/4.json",
                3587,
                "c29a5c16e65f943c8aa367a454ecbba72c3f32df6529bb4358547b1f09227a18",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Family%20Relationship/4.json",
            ),
            DataFile(
                "cpsycoune/Family Relationship/5.json",
                3187,
                "bd79c6c206e941fab9aac896b32252ada7a1b300a2d941462b2038f69d5d5f54",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Family%20Relationship/5.json",
            ),
            DataFile(
                "cpsycoune/Love&Marriage/1.json",
                3053,
                "28e524056a31c63fe9956db031a0679205af2f0222a9748548cb291ad666d69b",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Love%26Marriage/1.json",
            ),
            DataFile(
                "cpsycoune/Love&Marriage/2.json",
                3617,
                "67ba574af9fb6f8a36b1f070f9eae3ae9121d0ad8cc01cd083676d2b8dd6d439",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Love%26Marriage/2.json",
            ),
            DataFile(
                "cpsycoune/Love&Marriage/3.json",
                2151,
                "48723d146bb590bdaa34c1ac2cee668070fdffe98747c8783e4d5d5950ba18ab",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Love%26Marriage/3.json",
            ),
            DataFile(
                "cpsycoune/Love&Marriage/4.json",
                2013,
                "e368e4d600e6047eb35b51300134ddc0624d7c9c39ae4545e831d3f3e7eb5593",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Love%26Marriage/4.json",
            ),
            DataFile(
                "cpsycoune/Love&Marriage/5.json",
                2494,
                "00cab631f0baf61133455606c784961066ba97c7dd7fcb1907d56947ea46dba1",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Love%26Marriage/5.json",
            ),
            DataFile(
                "cpsycoune/Mental Disease/1.json",
                2126,
                "6a57d4f2ae916afb6b8cff46a44f93469780d67319e177d7c5fbd3e9cdd4b49d",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Mental%20Disease/1.json",
            ),
            DataFile(
                "cpsycoune/Mental Disease/2.json",
                2633,
                "bf05f8ee04caa43ee227a814e03720c08c6c4ddeb8121de3beb61113bc1a0827",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Mental%20Disease/2.json",
            ),
            DataFile(
                "cpsycoune/Mental Disease/3.json",
                2666,
                "21e2e0241e6d57046e88005312d3f71c0dfe82df84579224130e0237a0a125aa",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Mental%20Disease/3.json",
            ),
            DataFile(
                "cpsycoune/Mental Disease/4.json",
                2206,
                "686b59ef2210b5d255a4629511caad0a0561fcff41afaed3b09b0c24be749051",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Mental%20Disease/4.json",
            ),
            DataFile(
                "cpsycoune/Mental Disease/5.json",
                3344,
                "1c810120b2964e8c25371f492c6bb6723b1d3e7995e227a195eebbbcb04553ec",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Mental%20Disease/5.json",
            ),
            DataFile(
                "cpsycoune/Self-growth/1.json",
                2524,
                "769a446d08085a1162b45468a71719f4d1564f808ab8266d68c8cb8cc6fbcda7",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Self-growth/1.json",
            ),
            DataFile(
                "cpsycoune/Self-growth/2.json",
                2782,
                "815805c876310d14b86d9910c210ab86460979d97360c35f090ac3d9befbf097",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Self-growth/2.json",
            ),
            DataFile(
                "cpsycoune/Self-growth/3.json",
                2695,
                "2194b1215fae30b8f2823b3f5e1c8f40181644bbc07b528d0084f572bbec69bd",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Self-growth/3.json",
            ),
            DataFile(
                "cpsycoune/Self-growth/4.json",
                1837,
                "4ac155707f60cc2069e20ec62051200d65d650ef8cb81111f69b5a0fbff433ed",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Self-growth/4.json",
            ),
            DataFile(
                "cpsycoune/Self-growth/5.json",
                2992,
                "86dad05afb8dde99a7ee42388e3af19c4ad5f1209172ce405323fa96c23a7f3b",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Self-growth/5.json",
            ),
            DataFile(
                "cpsycoune/Sex/1.json",
                2881,
                "40d45fcc9ec2248e6b23de8a5658a719f75cf8fda9108004f8e89ab925f9b2c5",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Sex/1.json",
            ),
            DataFile(
                "cpsycoune/Sex/2.json",
                2865,
                "c5cf071ed28f7971f3fb6cc911353e3cb434faf7fc4753076ad18eeeac3ad79e",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Sex/2.json",
            ),
            DataFile(
                "cpsycoune/Sex/3.json",
                2129,
                "89467dabffb0b714b32ff0fed2c7e53aaaf9644a2b21494116091fedb0408a17",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Sex/3.json",
            ),
            DataFile(
                "cpsycoune/Sex/4.json",
                2041,
                "e6f70ef06de4edefc425872f2f519a95aab6741a1c67013eebc4ede9533b1856",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Sex/4.json",
            ),
            DataFile(
                "cpsycoune/Sex/5.json",
                2966,
                "7241fdd7559816804982a9385b9b7b9658173cf379320cbaec9d407a38657cd7",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Sex/5.json",
            ),
            DataFile(
                "cpsycoune/Social Relationship/1.json",
                1874,
                "ba442e00d52fff5882cfa2e5e3d56e7e07f36316648c64caec4854de37f932b8",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Social%20Relationship/1.json",
            ),
            DataFile(
                "cpsycoune/Social Relationship/2.json",
                3241,
                "0bf855613cf3bcff44d2ca700a419c5afb007a2af4456241ac3398006b9b0fc9",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Social%20Relationship/2.json",
            ),
            DataFile(
                "cpsycoune/Social Relationship/3.json",
                3589,
                "6588805745f68835b6b092d483a2acbfb451913ce63b989e6f46dc0ba82db24a",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Social%20Relationship/3.json",
            ),
            DataFile(
                "cpsycoune/Social Relationship/4.json",
                1870,
                "48ff12c28a2c618d99da720dcb4377775972ca72c364a9e82131c3f25ee5a33e",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Social%20Relationship/4.json",
            ),
            DataFile(
                "cpsycoune/Social Relationship/5.json",
                3939,
                "d3b92d226a8e67aa4f461b226a420d520cddf7b0cf7ae2ad837810a3c05c4161",
                "https://raw.githubusercontent.com/CAS-SIAT-XinHai/CPsyCoun/1954f2e2d01d3b0f568e1673a525a6d3d9a34c03/CPsyCounE/Social%20Relationship/5.json",
            ),
        ),
    ),
    Dataset(
        name="llms-mental-health-crisis",
        description="LLMs-Mental-Health-Crisis: human- and LLM-labelled crisis inputs (7 labels) + escalation protocol",
        license="none stated; inputs pooled from Hugging Face datasets with their own licenses",
        source="ellisalicante/LLMs-Mental-Health-Crisis@f4a70c1fd4ea6f7e09d50721065db4a4039e9fac",
        files=(
            DataFile(
                "llms-mental-health-crisis/human_label/H1_labeled_n206_s42.json",
                120554,
                "6dbeccf01e64be2cf10c2ef56ab73965653bc53f1453185074ec96cf01a1e0f6",
                "https://raw.githubusercontent.com/ellisalicante/LLMs-Mental-Health-Crisis/f4a70c1fd4ea6f7e09d50721065db4a4039e9fac/data/human_label/H1_labeled_n206_s42.json",
            ),
            DataFile(
                "llms-mental-health-crisis/human_label/H1_scores_n206_s42.json",
                727060,
                "44bc7e8632cb94a4440e376fce2b332beeba397753430ec75490b1818a742109",
                "https://raw.githubusercontent.com/ellisalicante/LLMs-Mental-Health-Crisis/f4a70c1fd4ea6f7e09d50721065db4a4039e9fac/data/human_label/H1_scores_n206_s42.json",
            ),
            DataFile(
                "llms-mental-health-crisis/human_label/H2_labeled_n206_s42.json",
                120227,
                "17fb1056c76da48c41f3bc8d456c2046469a2dec0a7c5d030b2358843093917c",
                "https://raw.githubusercontent.com/ellisalicante/LLMs-Mental-Health-Crisis/f4a70c1fd4ea6f7e09d50721065db4a4039e9fac/data/human_label/H2_labeled_n206_s42.json",
            ),
            DataFile(
                "llms-mental-health-crisis/human_label/H2_scores_n206_s42.json",
                713344,
                "34899c3c155cf77632e1e778108334ebf1172298d6925e24d720e23ad93e1e5c",
                "https://raw.githubusercontent.com/ellisalicante/LLMs-Mental-Health-Crisis/f4a70c1fd4ea6f7e09d50721065db4a4039e9fac/data/human_label/H2_scores_n206_s42.json",
            ),
            DataFile(
                "llms-mental-health-crisis/human_label/H3_labeled_n206_s42.json",
                120657,
                "6bc390720e065cdfefa7ab9c0cc379f53bbe38b9baffbbb29e238ed3de52aae6",
                "https://raw.githubusercontent.com/ellisalicante/LLMs-Mental-Health-Crisis/f4a70c1fd4ea6f7e09d50721065db4a4039e9fac/data/human_label/H3_labeled_n206_s42.json",
            ),
            DataFile(
                "llms-mental-health-crisis/human_label/H4_labelled_n206_s42.json",
                120383,
                "684be756f276c8e2ade7776c228bd5268cc0816c5014db415e8afef6a4ebc0df",
                "https://raw.githubusercontent.com/ellisalicante/LLMs-Mental-Health-Crisis/f4a70c1fd4ea6f7e09d50721065db4a4039e9fac/data/human_label/H4_labelled_n206_s42.json",
            ),
            DataFile(
                "llms-mental-health-crisis/human_label/human-labeled-sampled_dataset_n206_s42-merged_labels.json",
                150151,
                "82924e4ae8d7b86fcbc7d9a914b5a5e963e464e62235d37fc12da466eea4ebdb",
                "https://raw.githubusercontent.com/ellisalicante/LLMs-Mental-Health-Crisis/f4a70c1fd4ea6f7e09d50721065db4a4039e9fac/data/human_label/human-labeled-sampled_dataset_n206_s42-merged_labels.json",
            ),
            DataFile(
                "llms-mental-health-crisis/llm_evaluator/protocol.csv",
                5959,
                "65c0c002b2fee9e21a826f6e1630fe8d5bf9998743904cc8c6e983776ed1511c",
                "https://raw.githubusercontent.com/ellisalicante/LLMs-Mental-Health-Crisis/f4a70c1fd4ea6f7e09d50721065db4a4039e9fac/data/llm_evaluator/protocol.csv",
            ),
            DataFile(
                "llms-mental-health-crisis/llm_label/gpt-4o-mini-labeled-sampled_dataset_n_2046_nPerD168_seed0-merged-labels.json",
                1422428,
                "ff1ade27018fb30a1d07377664778f4652c57a90d64641c3db4e260986e9fb6f",
                "https://raw.githubusercontent.com/ellisalicante/LLMs-Mental-Health-Crisis/f4a70c1fd4ea6f7e09d50721065db4a4039e9fac/data/llm_label/gpt-4o-mini-labeled-sampled_dataset_n_2046_nPerD168_seed0-merged-labels.json",
            ),
            DataFile(
                "llms-mental-health-crisis/processed/sampled_dataset_n_200_merged_n50-noSeed_156-s42.json",
                124081,
                "123727f5870663bf62d97a96a8f53b72b2939870664f04d0336b6758ff08a72e",
                "https://raw.githubusercontent.com/ellisalicante/LLMs-Mental-Health-Crisis/f4a70c1fd4ea6f7e09d50721065db4a4039e9fac/data/processed/sampled_dataset_n_200_merged_n50-noSeed_156-s42.json",
            ),
            DataFile(
                "llms-mental-health-crisis/processed/sampled_dataset_n_2046_nPerD168_seed0.json",
                1201367,
                "a4cacb7f899b7d99e1acbfce995eafa6325735d47e19cb2f2f0c04063614b344",
                "https://raw.githubusercontent.com/ellisalicante/LLMs-Mental-Health-Crisis/f4a70c1fd4ea6f7e09d50721065db4a4039e9fac/data/processed/sampled_dataset_n_2046_nPerD168_seed0.json",
            ),
        ),
    ),
    Dataset(
        name="c-ssrs",
        description="Reddit C-SSRS suicide-severity dataset (Gaur et al. 2019), 500 users, 5 ordinal labels",
        license="CC BY (Zenodo record 2667859)",
        source="AmanuelF/Suicide-Risk-Assessment-using-Reddit@15479cd8413c35fda5af0a553179f9c8dc98da6c",
        files=(
            DataFile(
                "c-ssrs/500_Reddit_users_posts_labels.csv",
                3622335,
                "7be0336be18f5b198f260b46fccab7abf7ddb4dd593c7b57829f7f9a7d765b24",
                "https://raw.githubusercontent.com/AmanuelF/Suicide-Risk-Assessment-using-Reddit/15479cd8413c35fda5af0a553179f9c8dc98da6c/anonymized_dataset/500_Reddit_users_posts_labels.csv",
            ),
        ),
    ),
    Dataset(
        name="elephant-samples",
        description="ELEPHANT sycophancy sets, 10-row OEQ and AITA samples only (full sets: elephant-full)",
        license="CC0 1.0",
        source="myracheng/elephant@83263944cffdfd8caa48f8da2436642fd4e681bc",
        files=(
            DataFile(
                "elephant/AITA_sample.csv",
                16022,
                "38b50d8b42abf966909c5c282f542f3b1a9a4545a0fe95e004ba9ff4e928a5e8",
                "https://raw.githubusercontent.com/myracheng/elephant/83263944cffdfd8caa48f8da2436642fd4e681bc/datasets/AITA_sample.csv",
            ),
            DataFile(
                "elephant/OEQ_sample.csv",
                28008,
                "3cafb2e0a9cac2de6d10a3afdce54b5e7de0c5574b16bf7ebc53e4be70c9bfce",
                "https://raw.githubusercontent.com/myracheng/elephant/83263944cffdfd8caa48f8da2436642fd4e681bc/datasets/OEQ_sample.csv",
            ),
        ),
    ),
    Dataset(
        name="confaide",
        description="ConfAIde original privacy tiers 1, 2a, 2b, 3 (+control)",
        license="MIT",
        source="skywalker023/confAIde@3174c63e689226189675a740b7bf9053f10bae50",
        files=(
            DataFile(
                "confaide/tier_1.txt",
                3491,
                "63261cf847efb3f35f359913bea828131298ee04980189ed7d75eae05f76ac58",
                "https://raw.githubusercontent.com/skywalker023/confAIde/3174c63e689226189675a740b7bf9053f10bae50/benchmark/tier_1.txt",
            ),
            DataFile(
                "confaide/tier_1_labels.txt",
                39,
                "76c0c3b970ca25016ff224bf47910b5b8c89fb106e731cc7f5a3712e63cababb",
                "https://raw.githubusercontent.com/skywalker023/confAIde/3174c63e689226189675a740b7bf9053f10bae50/benchmark/tier_1_labels.txt",
            ),
            DataFile(
                "confaide/tier_2_labels.txt",
                667,
                "cd573da5a542a4d92f3a81ed5b09b66cc25a6ae0ea656aaaf754af43304bbb34",
                "https://raw.githubusercontent.com/skywalker023/confAIde/3174c63e689226189675a740b7bf9053f10bae50/benchmark/tier_2_labels.txt",
            ),
            DataFile(
                "confaide/tier_2a.txt",
                41034,
                "a869099fab404cde9dd50f23c20668063021afa8f080e190b348a5a4da14b979",
                "https://raw.githubusercontent.com/skywalker023/confAIde/3174c63e689226189675a740b7bf9053f10bae50/benchmark/tier_2a.txt",
            ),
            DataFile(
                "confaide/tier_2b.txt",
                78453,
                "8c194006c92816f56a9ee2f6ec3bf09f29bb1a543408ce154096c8c67f72df37",
                "https://raw.githubusercontent.com/skywalker023/confAIde/3174c63e689226189675a740b7bf9053f10bae50/benchmark/tier_2b.txt",
            ),
            DataFile(
                "confaide/tier_3.txt",
                284253,
                "193ab78cc9908b09a146dc1f77af193f86afc622b942f7e17aa0d2ffa3d38fc2",
                "https://raw.githubusercontent.com/skywalker023/confAIde/3174c63e689226189675a740b7bf9053f10bae50/benchmark/tier_3.txt",
            ),
            DataFile(
                "confaide/tier_3_control.txt",
                41644,
                "7affb08b90d5b7161980a731d717f87cb4e4d0506b02f196473beb3cc28c13c0",
                "https://raw.githubusercontent.com/skywalker023/confAIde/3174c63e689226189675a740b7bf9053f10bae50/benchmark/tier_3_control.txt",
            ),
        ),
    ),
    Dataset(
        name="psyqa-sample",
        description="PsyQA public 100-item example (Chinese; source corpus of PsyLeak)",
        license="none stated; the full PsyQA is released only under a user agreement",
        source="thu-coai/PsyQA@e224c7e518c98a0c3df11e2fc5e6698044d8e156",
        files=(
            DataFile(
                "psyqa/PsyQA_example.json",
                634689,
                "af0e8322727f4ea1a6dd5aac9c116ea56c488a704e3065e1382138e89d8a6946",
                "https://raw.githubusercontent.com/thu-coai/PsyQA/e224c7e518c98a0c3df11e2fc5e6698044d8e156/PsyQA_example.json",
            ),
        ),
    ),
)

# Sets the project may not redistribute or could not find a pinned copy of. Tasks that need them report
# "not run: <name> missing — <how_to_get>".
_USER_SUPPLIED = (
    Dataset(
        name="swmh",
        description="SWMH: Reddit posts from 5 mental-health subreddits (54,412 posts) for diagnosis",
        license="gated on Hugging Face; users agree not to redistribute the data",
        source="huggingface.co/datasets/AIMH/SWMH",
        files=(),
        gated=True,
        how_to_get=(
            "request access at https://huggingface.co/datasets/AIMH/SWMH (log in and accept its terms), "
            "download the train/validation/test splits and save them as CSV with columns text,label "
            "(labels as released, e.g. self.depression, self.SuicideWatch) to <data-dir>/swmh/train.csv, "
            "<data-dir>/swmh/val.csv and <data-dir>/swmh/test.csv"
        ),
        user_files=("swmh/train.csv", "swmh/val.csv", "swmh/test.csv"),
    ),
    Dataset(
        name="d4",
        description="D4: 1,339 Chinese depression-diagnosis dialogues (control/mild/moderate/severe)",
        license="Data Usage Agreement; no transfer or sharing",
        source="https://x-lance.github.io/D4/",
        files=(),
        gated=True,
        how_to_get=(
            "D4 is released only under a signed Data Usage Agreement: follow the instructions at "
            "https://x-lance.github.io/D4/ (e-mail the signed DUA to the authors), then put the files you "
            "receive, unchanged, into <data-dir>/d4/"
        ),
        user_files=("d4/*",),
    ),
    Dataset(
        name="elephant-full",
        description="ELEPHANT full OEQ (3,027 open-ended queries) and AITA sets for sycophancy",
        license="CC0 1.0",
        source="myracheng/elephant@83263944cffdfd8caa48f8da2436642fd4e681bc",
        files=(),
        gated=True,
        how_to_get=(
            "download datasets/OEQ.csv and datasets/AITA.csv from https://github.com/myracheng/elephant "
            "(large files: use the GitHub web page or a git clone) and place them at "
            "<data-dir>/elephant/OEQ.csv and <data-dir>/elephant/AITA.csv"
        ),
        user_files=("elephant/OEQ.csv", "elephant/AITA.csv"),
    ),
    Dataset(
        name="pas",
        description="PAS: problematic action statements (ELEPHANT / 'Sycophantic AI decreases prosocial intentions')",
        license="unknown (OSF project smvw7)",
        source="https://osf.io/smvw7/",
        files=(),
        gated=True,
        how_to_get=(
            "download the problematic action statements from the OSF project https://osf.io/smvw7/ "
            "(arXiv 2510.01395) and save them as CSV with one statement per row in a column named text "
            "at <data-dir>/elephant/PAS.csv"
        ),
        user_files=("elephant/PAS.csv",),
    ),
)

def _with_methods() -> tuple[Dataset, ...]:
    from .methods import as_dataset  # the authors' method files, listed in methods.json
    return _DOWNLOADABLE + (as_dataset(),)


_DOWNLOADABLE = _with_methods()
DATASETS: dict[str, Dataset] = {d.name: d for d in _DOWNLOADABLE + _USER_SUPPLIED}

_BY_PATH: dict[str, Dataset] = {f.path: d for d in _DOWNLOADABLE for f in d.files}


def dataset_for_path(relpath: str) -> Dataset | None:
    """The dataset a data-dir-relative path belongs to (a manifest file or a user-supplied file)."""
    rel = relpath.replace("\\", "/").removeprefix("./")
    if rel in _BY_PATH:
        return _BY_PATH[rel]
    for d in _USER_SUPPLIED:
        if any(fnmatch.fnmatchcase(rel, pattern) for pattern in d.user_files):
            return d
    return None
