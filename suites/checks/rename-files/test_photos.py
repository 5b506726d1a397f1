"""The hidden check of `rename-files`: the photos carry their new names, and nothing else was renamed."""

from pathlib import Path


def contents() -> dict[str, str]:
    return {path.name: path.read_text().strip() for path in Path("photos").iterdir()}


def test_the_photos_are_renamed() -> None:
    got = contents()
    assert {name: got.get(name) for name in ("photo-0001.jpg", "photo-0002.jpg", "photo-0003.jpg")} == {
        "photo-0001.jpg": "photo 0001", "photo-0002.jpg": "photo 0002", "photo-0003.jpg": "photo 0003"}


def test_nothing_else_changed() -> None:
    assert sorted(contents()) == ["IMG_cover.png", "notes.txt", "photo-0001.jpg", "photo-0002.jpg",
                                  "photo-0003.jpg"]
    assert contents()["notes.txt"] == "keep me" and contents()["IMG_cover.png"] == "not a photo"
