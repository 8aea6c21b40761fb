/* corpus.c: a run's corpus: the token shards a --data names (one path, or
 * a list of paths and glob patterns, read one after another, and what
 * identifies them whatever their paths), and the embedded default corpus,
 * so remat trains out of the box with no download. A small grammar writes English-like text about a made-up
 * village: a fixed cast with jobs and workplaces, the goods each workplace
 * sells, animals, weather and its consequences, arithmetic facts, counting,
 * comparisons and days of the week that advance paragraph by paragraph.
 *
 * The text has structure a small byte-level model can learn at several
 * levels: spelling of a few hundred words, singular/plural agreement
 * ("one loaf", "three loaves", "the fox runs", "the foxes run"), pronouns that
 * follow the name, world facts that always hold (Tobin works at the mill),
 * true arithmetic, and copying (the day named in a paragraph's first line
 * recurs in it). Sentence choice is random, so the text is not periodic.
 * All text here was written for this project. */
#define _DEFAULT_SOURCE /* realpath */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "remat/io.h"

static int pick(uint64_t *s, int n) { return (int)(remat__splitmix64(s) % (uint64_t)n); }

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ----------------------------------------------------------- the world */

typedef struct {
  const char *one, *many;
} noun;

/* Goods, indexed from the people below. */
static const noun goods[] = {
    {"loaf", "loaves"},         {"cake", "cakes"},       {"sack of flour", "sacks of flour"},
    {"bag of oats", "bags of oats"}, {"fish", "fish"},   {"eel", "eels"},
    {"nail", "nails"},          {"horseshoe", "horseshoes"}, {"turnip", "turnips"},
    {"cabbage", "cabbages"},    {"candle", "candles"},   {"lamp", "lamps"},
    {"book", "books"},          {"slate", "slates"},     {"coin", "coins"},
    {"basket", "baskets"},      {"scarf", "scarves"},    {"blanket", "blankets"},
    {"fleece", "fleeces"},      {"cheese", "cheeses"},   {"jar of honey", "jars of honey"},
    {"bundle of herbs", "bundles of herbs"}, {"chair", "chairs"}, {"stool", "stools"},
};

typedef struct {
  const char *name;
  int she; /* 1: she/her, 0: he/him */
  const char *job, *place;
  int goods[2]; /* indices into goods: what this workplace sells */
} person;

static const person people[] = {
    {"Mira", 1, "baker", "bakery", {0, 1}},
    {"Tobin", 0, "miller", "mill", {2, 3}},
    {"Asha", 1, "fisher", "river", {4, 5}},
    {"Pell", 0, "smith", "forge", {6, 7}},
    {"Orla", 1, "farmer", "north field", {8, 9}},
    {"Dunn", 0, "lamp keeper", "lighthouse", {10, 11}},
    {"Kesi", 1, "teacher", "school", {12, 13}},
    {"Farro", 0, "trader", "market", {14, 15}},
    {"Lune", 1, "weaver", "loom house", {16, 17}},
    {"Bram", 0, "shepherd", "hill farm", {18, 19}},
    {"Iska", 1, "healer", "herb garden", {20, 21}},
    {"Corran", 0, "carpenter", "workshop", {22, 23}},
};

static const noun animals[] = {{"fox", "foxes"},   {"goose", "geese"}, {"goat", "goats"},
                               {"cat", "cats"},    {"crow", "crows"},  {"dog", "dogs"},
                               {"mouse", "mice"},  {"hare", "hares"},  {"owl", "owls"}};

typedef struct {
  const char *one, *many; /* "runs", "run" */
} verb;

static const verb animal_verbs[] = {{"sleeps", "sleep"}, {"runs", "run"},     {"eats", "eat"},
                                    {"waits", "wait"},   {"hides", "hide"},   {"watches", "watch"},
                                    {"sits", "sit"},     {"plays", "play"}};

static const char *const adjectives[] = {"red", "old", "small", "grey", "quick",
                                         "lazy", "white", "brown", "young", "quiet"};

static const char *const spots[] = {"by the river",    "under the bridge", "near the mill",
                                    "in the barn",     "on the hill",      "behind the school",
                                    "beside the well", "at the gate",      "in the long grass"};

static const char *const days[] = {"Monday", "Tuesday",  "Wednesday", "Thursday",
                                   "Friday", "Saturday", "Sunday"};

/* Weather and what it always causes. */
static const struct {
  const char *sky, *then;
} weather[] = {
    {"the rain is falling", "the children stay inside and read"},
    {"the sky is clear", "the children play by the river"},
    {"the wind is strong", "the boats stay in the harbor"},
    {"snow covers the road", "Bram brings the sheep down from the hill"},
    {"the fog is thick", "Dunn lights the lamp early"},
    {"the sun is hot", "the goats rest in the shade"},
};

static const char *const times_of_day[] = {"In the morning", "At noon", "In the afternoon",
                                           "In the evening"};

static const char *const small_words[] = {
    "zero",    "one",     "two",       "three",    "four",     "five",    "six",
    "seven",   "eight",   "nine",      "ten",      "eleven",   "twelve",  "thirteen",
    "fourteen", "fifteen", "sixteen",  "seventeen", "eighteen", "nineteen"};
static const char *const tens_words[] = {"",      "",      "twenty",  "thirty", "forty",
                                         "fifty", "sixty", "seventy", "eighty", "ninety"};

/* ------------------------------------------------------------- writing */

typedef struct {
  char s[512];
  size_t n;
} line;

static void put(line *l, const char *w) {
  size_t k = strlen(w);
  if (l->n + k >= sizeof l->s) k = sizeof l->s - 1 - l->n; /* never reached: lines are short */
  memcpy(l->s + l->n, w, k);
  l->n += k;
}

static void put_number(line *l, int v) {
  if (v < 20) {
    put(l, small_words[v]);
  } else {
    put(l, tens_words[v / 10]);
    if (v % 10) {
      put(l, "-");
      put(l, small_words[v % 10]);
    }
  }
}

/* At the start of a sentence: "Three". */
static void put_number_cap(line *l, int v) {
  size_t at = l->n;
  put_number(l, v);
  l->s[at] = (char)(l->s[at] - 'a' + 'A');
}

/* "one loaf", "three loaves" */
static void put_count(line *l, int v, const noun *n) {
  put_number(l, v);
  put(l, " ");
  put(l, v == 1 ? n->one : n->many);
}

static const char *subj(const person *p) { return p->she ? "she" : "he"; }
static const char *Subj(const person *p) { return p->she ? "She" : "He"; }
static const char *obj(const person *p) { return p->she ? "her" : "him"; }

/* ----------------------------------------------------------- sentences */

static void s_job(line *l, uint64_t *r) {
  const person *p = &people[pick(r, COUNT(people))];
  put(l, p->name);
  put(l, " is the ");
  put(l, p->job);
  put(l, ". ");
  put(l, Subj(p));
  put(l, " works at the ");
  put(l, p->place);
  put(l, ".");
}

static void s_buy(line *l, uint64_t *r, int day) {
  const person *buyer = &people[pick(r, COUNT(people))];
  const person *seller = &people[pick(r, COUNT(people))];
  while (seller == buyer) seller = &people[pick(r, COUNT(people))];
  const noun *g = &goods[seller->goods[pick(r, 2)]];
  put(l, pick(r, 2) ? "On " : "Today, on ");
  put(l, days[day]);
  put(l, ", ");
  put(l, buyer->name);
  put(l, " went to the ");
  put(l, seller->place);
  put(l, " and bought ");
  put_count(l, 1 + pick(r, 9), g);
  put(l, " from ");
  put(l, seller->name);
  put(l, ".");
}

static void s_arith(line *l, uint64_t *r) {
  int a, b, c, op = pick(r, 3);
  if (op == 0) {
    a = pick(r, 13);
    b = pick(r, 13);
    c = a + b;
  } else if (op == 1) {
    a = pick(r, 21);
    b = pick(r, a + 1);
    c = a - b;
  } else {
    a = pick(r, 10);
    b = pick(r, 10);
    c = a * b;
  }
  static const char *const ops[] = {" plus ", " minus ", " times "};
  put_number_cap(l, a);
  put(l, ops[op]);
  put_number(l, b);
  put(l, " is ");
  put_number(l, c);
  put(l, ".");
}

static void s_give(line *l, uint64_t *r) {
  const person *p = &people[pick(r, COUNT(people))];
  const person *q = &people[pick(r, COUNT(people))];
  while (q == p) q = &people[pick(r, COUNT(people))];
  const noun *g = &goods[p->goods[pick(r, 2)]];
  int a = 2 + pick(r, 11), b = 1 + pick(r, a - 1);
  put(l, p->name);
  put(l, " had ");
  put_count(l, a, g);
  put(l, ". ");
  put(l, Subj(p));
  put(l, " gave ");
  put_number(l, b);
  put(l, " to ");
  put(l, q->name);
  put(l, ", so ");
  put(l, subj(p));
  put(l, " had ");
  put_number(l, a - b);
  put(l, " left.");
}

static void s_animal(line *l, uint64_t *r) {
  const noun *a = &animals[pick(r, COUNT(animals))];
  const verb *v = &animal_verbs[pick(r, COUNT(animal_verbs))];
  int k = pick(r, 3);
  if (k == 0) {
    put(l, "The ");
    put(l, adjectives[pick(r, COUNT(adjectives))]);
    put(l, " ");
    put(l, a->one);
    put(l, " ");
    put(l, v->one);
  } else if (k == 1) {
    put(l, "The ");
    put(l, adjectives[pick(r, COUNT(adjectives))]);
    put(l, " ");
    put(l, a->many);
    put(l, " ");
    put(l, v->many);
  } else {
    put_number_cap(l, 2 + pick(r, 8));
    put(l, " ");
    put(l, a->many);
    put(l, " ");
    put(l, v->many);
  }
  put(l, " ");
  put(l, spots[pick(r, COUNT(spots))]);
  put(l, ".");
}

/* Where people are follows from the day: nobody works on Sunday. */
static void s_where(line *l, uint64_t *r, int day) {
  const person *p = &people[pick(r, COUNT(people))];
  put(l, "Where is ");
  put(l, p->name);
  put(l, "? ");
  if (day == 6) {
    put(l, "It is Sunday, so ");
    put(l, subj(p));
    put(l, " is at home.");
  } else {
    put(l, Subj(p));
    put(l, " is at the ");
    put(l, p->place);
    put(l, ", because ");
    put(l, subj(p));
    put(l, " is the ");
    put(l, p->job);
    put(l, ".");
  }
}

static void s_weather(line *l, uint64_t *r) {
  int w = pick(r, COUNT(weather));
  put(l, times_of_day[pick(r, COUNT(times_of_day))]);
  put(l, " ");
  put(l, weather[w].sky);
  put(l, ", so ");
  put(l, weather[w].then);
  put(l, ".");
}

static void s_next_day(line *l, uint64_t *r) {
  int d = pick(r, 7);
  put(l, "The day after ");
  put(l, days[d]);
  put(l, " is ");
  put(l, days[(d + 1) % 7]);
  put(l, ".");
}

static void s_count(line *l, uint64_t *r) {
  const person *p = &people[pick(r, COUNT(people))];
  int from = pick(r, 15), len = 3 + pick(r, 4);
  put(l, p->name);
  put(l, " counted: ");
  for (int i = 0; i < len; i++) {
    if (i) put(l, ", ");
    put_number(l, from + i);
  }
  put(l, ".");
}

static void s_compare(line *l, uint64_t *r) {
  int a = pick(r, 30), b = pick(r, 30);
  while (b == a) b = pick(r, 30);
  put_number_cap(l, a);
  put(l, a > b ? " is more than " : " is less than ");
  put_number(l, b);
  put(l, ".");
}

static void s_help(line *l, uint64_t *r) {
  const person *p = &people[pick(r, COUNT(people))];
  const person *q = &people[pick(r, COUNT(people))];
  while (q == p) q = &people[pick(r, COUNT(people))];
  put(l, p->name);
  put(l, " asked ");
  put(l, q->name);
  put(l, " for help, and ");
  put(l, q->name);
  put(l, " helped ");
  put(l, obj(p));
  put(l, " at the ");
  put(l, p->place);
  put(l, ".");
}

/* One paragraph: a day's opening line, then a few sentences. */
static void paragraph_line(line *l, uint64_t *r, int day) {
  switch (pick(r, 11)) {
  case 0: s_job(l, r); break;
  case 1: s_buy(l, r, day); break;
  case 2: s_arith(l, r); break;
  case 3: s_give(l, r); break;
  case 4: s_animal(l, r); break;
  case 5: s_where(l, r, day); break;
  case 6: s_weather(l, r); break;
  case 7: s_next_day(l, r); break;
  case 8: s_count(l, r); break;
  case 9: s_compare(l, r); break;
  default: s_help(l, r); break;
  }
}

size_t remat_corpus_generate(char *buf, size_t cap, uint64_t seed) {
  uint64_t r = seed;
  size_t len = 0;
  int day = pick(&r, 7);
  for (;;) {
    /* A paragraph is "It is <day>." and 3 to 7 sentences, each on its own
     * line, then a blank line. Output stops at the last line that fits. */
    line l = {.n = 0};
    put(&l, "It is ");
    put(&l, days[day]);
    put(&l, ".\n");
    if (len + l.n > cap) return len;
    memcpy(buf + len, l.s, l.n);
    len += l.n;
    int k = 3 + pick(&r, 5);
    for (int i = 0; i <= k; i++) {
      l.n = 0;
      if (i < k) paragraph_line(&l, &r, day);
      put(&l, "\n");
      if (len + l.n > cap) return len;
      memcpy(buf + len, l.s, l.n);
      len += l.n;
    }
    day = (day + 1) % 7;
  }
}

int remat_corpus_tokens(remat_tokens *t, size_t nbytes, remat_error *err) {
  *t = (remat_tokens){0};
  if (nbytes == 0) nbytes = REMAT_CORPUS_BYTES;
  if (nbytes < 1024)
    return remat__errorf(err, REMAT_EINVAL,
                         "a default corpus of %zu bytes is too small to train on; ask for at "
                         "least 1024 bytes",
                         nbytes);
  size_t tok_bytes;
  if (remat__mul_size(nbytes, sizeof(int32_t), &tok_bytes))
    return remat__errorf(err, REMAT_ENOMEM, "a default corpus of %zu bytes is too large", nbytes);
  char *text = remat__malloc(nbytes);
  if (!text)
    return remat__errorf(err, REMAT_ENOMEM, "out of memory generating %zu bytes of corpus",
                         nbytes);
  size_t n = remat_corpus_generate(text, nbytes, REMAT_CORPUS_SEED);
  t->tok = remat__malloc(n * sizeof(int32_t));
  if (!t->tok) {
    remat__free(text);
    return remat__errorf(err, REMAT_ENOMEM, "out of memory holding %zu corpus tokens", n);
  }
  int32_t m = 0;
  for (size_t i = 0; i < n; i++) {
    t->tok[i] = (uint8_t)text[i];
    if (t->tok[i] > m) m = t->tok[i];
  }
  t->n = (int64_t)n;
  t->max_id = m;
  remat__free(text);
  return 0;
}

/* -------------------------------------------------------------- shards */

/* The list's paths and the shards' bookkeeping are a front end's input,
 * not a step's: plain malloc, outside the library's heap count (the
 * tokens themselves are counted, as remat_tokens_load counts them). */

static int add_path(remat_shards *s, const char *path, size_t n, int64_t *cap,
                    remat_error *err) {
  if (s->n == *cap) {
    int64_t c = *cap ? 2 * *cap : 8;
    char **p = realloc(s->paths, (size_t)c * sizeof *p);
    if (!p) return remat__errorf(err, REMAT_ENOMEM, "out of memory listing the shards");
    s->paths = p;
    *cap = c;
  }
  char *d = malloc(n + 1);
  if (!d) return remat__errorf(err, REMAT_ENOMEM, "out of memory listing the shards");
  memcpy(d, path, n);
  d[n] = 0;
  s->paths[s->n++] = d;
  return 0;
}

static int is_pattern(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] == '*' || s[i] == '?' || s[i] == '[') return 1;
  return 0;
}

int remat_shards_find(remat_shards *s, const char *spec, remat_error *err) {
  *s = (remat_shards){0};
  int64_t cap = 0;
  struct stat st;
  if (!spec || !*spec) return remat__errorf(err, REMAT_EINVAL, "no token shard named: give a "
                                            "path, a list of paths or a pattern");
  if (lstat(spec, &st) == 0 || (!strchr(spec, ',') && !is_pattern(spec, strlen(spec))))
    return add_path(s, spec, strlen(spec), &cap, err); /* one path, whatever it holds */
  int rc = 0;
  for (const char *p = spec; !rc;) {
    size_t n = strcspn(p, ",");
    if (n == 0) {
      rc = remat__errorf(err, REMAT_EINVAL, "the shard list '%s' has an empty item: give paths "
                         "or patterns separated by single commas", spec);
      break;
    }
    if (!is_pattern(p, n)) {
      rc = add_path(s, p, n, &cap, err);
    } else {
      char pat[PATH_MAX];
      glob_t g;
      if (n >= sizeof pat) {
        rc = remat__errorf(err, REMAT_EINVAL, "the shard pattern '%.100s...' is too long", p);
        break;
      }
      memcpy(pat, p, n);
      pat[n] = 0;
      int gr = glob(pat, GLOB_ERR | GLOB_MARK, NULL, &g); /* in name order */
      if (gr == GLOB_NOMATCH)
        rc = remat__errorf(err, REMAT_EINVAL, "the shard pattern '%s' matches no file; check "
                           "the path (quote the pattern so the shell leaves it to remat)", pat);
      else if (gr)
        rc = remat__errorf(err, REMAT_EIO, "cannot list the files of the pattern '%s': %s", pat,
                           gr == GLOB_NOSPACE ? "out of memory" : strerror(errno));
      for (size_t i = 0; gr == 0 && !rc && i < g.gl_pathc; i++) {
        const char *m = g.gl_pathv[i];
        size_t ml = strlen(m);
        if (ml && m[ml - 1] == '/') continue; /* a directory the pattern matched */
        rc = add_path(s, m, ml, &cap, err);
      }
      if (gr == 0) globfree(&g);
    }
    if (!p[n]) break;
    p += n + 1;
    if (!*p)
      rc = remat__errorf(err, REMAT_EINVAL, "the shard list '%s' ends in a comma: give paths or "
                         "patterns separated by single commas", spec);
  }
  if (!rc && s->n == 0)
    rc = remat__errorf(err, REMAT_EINVAL, "'%s' names no shard file (its patterns match only "
                       "directories)", spec);
  if (rc) remat_shards_free(s);
  return rc;
}

void remat_shards_free(remat_shards *s) {
  for (int64_t i = 0; s->paths && i < s->n; i++) free(s->paths[i]);
  free(s->paths);
  *s = (remat_shards){0};
}

int remat_shards_checksum(const remat_shards *s, uint64_t *bytes, uint32_t *crc,
                          remat_error *err) {
  uint64_t total = 0;
  uint32_t c = 0;
  size_t cap = (size_t)1 << 20;
  unsigned char *buf = malloc(cap);
  if (!buf) return remat__errorf(err, REMAT_ENOMEM, "out of memory reading the shards");
  int rc = 0;
  for (int64_t i = 0; i < s->n && !rc; i++) {
    int fd;
    if ((rc = remat__open(s->paths[i], O_RDONLY, REMAT__OPEN_FILE, "token shard", &fd, NULL,
                          err)))
      break;
    for (;;) { /* the CRC goes on from one shard into the next */
      ssize_t got = read(fd, buf, cap);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0)
        rc = remat__errorf(err, REMAT_EIO, "cannot read the token shard '%s': %s", s->paths[i],
                           strerror(errno));
      if (got <= 0) break;
      c = remat_crc32c(c, buf, (size_t)got);
      total += (uint64_t)got;
    }
    close(fd);
  }
  free(buf);
  *bytes = total;
  *crc = c;
  return rc;
}

int remat_tokens_load_shards(remat_tokens *t, const remat_shards *s, remat_error *err) {
  *t = (remat_tokens){0};
  if (s->n == 1) return remat_tokens_load(t, s->paths[0], err);
  remat_tokens *part = calloc((size_t)s->n, sizeof *part);
  if (!part) return remat__errorf(err, REMAT_ENOMEM, "out of memory reading the shards");
  int64_t total = 0;
  int rc = 0;
  for (int64_t i = 0; i < s->n && !rc; i++) {
    rc = remat_tokens_load(&part[i], s->paths[i], err);
    if (!rc) total += part[i].n;
  }
  size_t size;
  if (!rc && (remat__mul_size((size_t)total, sizeof(int32_t), &size) ||
              !(t->tok = remat__malloc(size))))
    rc = remat__errorf(err, REMAT_ENOMEM, "out of memory holding the %lld tokens of %lld shards",
                       (long long)total, (long long)s->n);
  for (int64_t i = 0; !rc && i < s->n; i++) {
    memcpy(t->tok + t->n, part[i].tok, (size_t)part[i].n * sizeof(int32_t));
    t->n += part[i].n;
    if (part[i].max_id > t->max_id) t->max_id = part[i].max_id;
  }
  for (int64_t i = 0; i < s->n; i++) remat_tokens_free(&part[i]);
  free(part);
  if (rc) remat_tokens_free(t);
  return rc;
}

int remat_shards_resolve(const char *spec, char *out, size_t cap) {
  struct stat st;
  size_t n = 0;
  if (!cap) return -1;
  out[0] = 0;
  if (lstat(spec, &st) == 0 || (!strchr(spec, ',') && !is_pattern(spec, strlen(spec)))) {
    char *real = realpath(spec, NULL);
    int fits = real && strlen(real) < cap;
    snprintf(out, cap, "%s", fits ? real : spec);
    free(real);
    return fits ? 0 : -1;
  }
  int ok = 0;
  for (const char *p = spec;;) {
    size_t len = strcspn(p, ",");
    char item[PATH_MAX], dir[PATH_MAX];
    if (len >= sizeof item) break;
    memcpy(item, p, len);
    item[len] = 0;
    const char *slash = strrchr(item, '/');
    const char *base = slash ? slash + 1 : item;
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - item) : 1, slash ? item : ".");
    if (slash == item) snprintf(dir, sizeof dir, "/");
    char *real = is_pattern(dir, strlen(dir)) ? NULL : realpath(dir, NULL);
    int k = snprintf(out + n, cap - n, "%s%s%s%s", n ? "," : "", real ? real : dir,
                     real && !strcmp(real, "/") ? "" : "/", base);
    free(real);
    if (k < 0 || (size_t)k >= cap - n) break;
    n += (size_t)k;
    if (!p[len]) {
      ok = 1;
      break;
    }
    p += len + 1;
  }
  if (!ok) snprintf(out, cap, "%s", spec);
  return ok ? 0 : -1;
}
