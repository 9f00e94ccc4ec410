"""Seeded text perturbations for the robustness pillar: character, word and sentence level, three intensities.

Why not nlpaug: it was evaluated (1.1.11, the current release). Its character augmenters run offline, but
(1) they draw from the process-global `random`/`numpy.random` state (seeded only through
`Randomness.seed`, which reseeds the whole process), so a variant would depend on what ran before it;
(2) they re-tokenise on every non-word character and join tokens back with spaces, so "I'm fine." comes
back as "I ' m fine." - text the person never wrote, outside the intended edit; (3) importing it needs
pandas. Its synonym augmenter needs NLTK's WordNet, which cannot be downloaded here. What the benchmark
needs is small, so it is written here: every operation draws from its own `random.Random`, seeded by a
stable hash of (run seed, item id, kind, intensity, text) - never Python's salted `hash()` - and leaves
every character it does not edit exactly as it was. Synonyms come from a small project-authored table of
words common in mental-health conversations (`SYNONYMS`, bottom of this module) instead of WordNet.

Kinds (variant key `<kind>@<intensity>`, e.g. `char_swap@low`):

* character level, applied to words of 3+ letters, one edit per chosen word: `char_swap` (two adjacent
  letters exchanged), `char_insert` (a random letter added), `char_delete` (a letter removed),
  `char_keyboard` (a letter replaced by a neighbouring key on a QWERTY keyboard). Intensity = share of
  eligible words edited: low 10%, medium 30%, high 50%.
* word level: `word_synonym` (a word replaced by a synonym from the table; "a"/"an" before it is fixed),
  `word_delete`, `word_repeat` (a word doubled), `word_swap` (two neighbouring words exchanged). Intensity
  = share of words edited: low 10%, medium 20%, high 40%. Synonym replacement can only touch words in the
  table, so on some texts it edits fewer words than that.
* sentence level: `sentence_irrelevant` (neutral unrelated sentences inserted at random sentence
  boundaries: low 1, medium 2, high 3) and `sentence_shuffle` (the sentences of a random window of
  neighbouring ones are put in a new order; the window covers low 10%, medium 50%, high 100% of the
  sentences, at least two). Shuffling keeps a sentence
  that opens with a linking word ("But", "So", "Because", ...) attached to the one before it, since
  moving it would change what it refers to; a text with a single movable block is left unchanged.

Intensities apply to each piece of text a task hands to the edit (a chat turn, a post, one message of
a list). Every count is at least 1 when the piece has anything eligible, so short pieces (a one-line chat
turn) are still perturbed; the intensities then differ only on longer ones."""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import string
from dataclasses import dataclass
from typing import Callable

KINDS = ("char_swap", "char_insert", "char_delete", "char_keyboard",
         "word_synonym", "word_delete", "word_repeat", "word_swap",
         "sentence_irrelevant", "sentence_shuffle")
INTENSITIES = ("low", "medium", "high")

CHAR_RATE = {"low": 0.1, "medium": 0.3, "high": 0.5}
WORD_RATE = {"low": 0.1, "medium": 0.2, "high": 0.4}
IRRELEVANT_COUNT = {"low": 1, "medium": 2, "high": 3}
SHUFFLE_WINDOW = {"low": 0.1, "medium": 0.5, "high": 1.0}


@dataclass(frozen=True)
class Perturbation:
    kind: str
    intensity: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS or self.intensity not in INTENSITIES:
            raise ValueError(f"unknown perturbation {self.kind}@{self.intensity}")

    @property
    def key(self) -> str:
        return f"{self.kind}@{self.intensity}"

    @property
    def level(self) -> str:
        return self.kind.split("_", 1)[0]  # char, word or sentence

    @classmethod
    def parse(cls, key: str) -> "Perturbation":
        kind, sep, intensity = key.partition("@")
        if not sep:
            raise ValueError(f"not a perturbation key: {key!r} (expected kind@intensity)")
        return cls(kind, intensity)


def perturbations(kinds: tuple[str, ...] = KINDS, intensities: tuple[str, ...] = INTENSITIES) -> list[Perturbation]:
    return [Perturbation(k, i) for k in kinds for i in intensities]


def stable_rng(*parts: object) -> random.Random:
    """A generator seeded from a sha256 of the parts, so the same inputs give the same draws in any process."""
    blob = json.dumps(parts, ensure_ascii=False, separators=(",", ":"), default=str)
    return random.Random(int.from_bytes(hashlib.sha256(blob.encode("utf-8")).digest()[:8], "big"))


def make_edit(p: Perturbation, *, seed: int, item_id: str) -> Callable[[str], str]:
    """The edit a task's `perturb(item, edit)` applies to each piece of the person's text.

    The text itself is part of the seed, so each turn of a dialogue gets its own draws and the result does
    not depend on the order in which a task edits its pieces."""
    def edit(text: str) -> str:
        return perturb_text(text, p.kind, p.intensity, stable_rng("trustmh.perturb", seed, item_id, p.kind,
                                                                  p.intensity, text))
    return edit


def perturb_text(text: str, kind: str, intensity: str, rng: random.Random) -> str:
    Perturbation(kind, intensity)  # validates
    if not text.strip():
        return text
    if kind.startswith("char_"):
        return _char_level(text, kind, CHAR_RATE[intensity], rng)
    if kind.startswith("word_"):
        return _word_level(text, kind, WORD_RATE[intensity], rng)
    if kind == "sentence_irrelevant":
        return _insert_irrelevant(text, IRRELEVANT_COUNT[intensity], rng)
    return _shuffle_sentences(text, SHUFFLE_WINDOW[intensity], rng)


def _how_many(rate: float, total: int) -> int:
    return 0 if total == 0 else max(1, int(rate * total + 0.5))


# --------------------------------------------------------------------------------------------------
# words: re.split with a capturing group gives [gap, word, gap, word, ..., gap]: words at odd indices

_WORD = re.compile(r"([A-Za-z]+(?:['’][A-Za-z]+)*)")


def _case_like(model: str, word: str) -> str:
    if len(model) > 1 and model.isupper():
        return word.upper()
    if model[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


# --- character level --------------------------------------------------------------------------------

_ROWS = ("qwertyuiop", "asdfghjkl", "zxcvbnm")


def _keyboard_neighbours() -> dict[str, str]:
    # Staggered rows: a key touches its row neighbours, keys i and i+1 of the row above, i-1 and i below.
    out = {}
    for r, row in enumerate(_ROWS):
        for i, ch in enumerate(row):
            near = [row[j] for j in (i - 1, i + 1) if 0 <= j < len(row)]
            if r > 0:
                near += [_ROWS[r - 1][j] for j in (i, i + 1) if j < len(_ROWS[r - 1])]
            if r < len(_ROWS) - 1:
                near += [_ROWS[r + 1][j] for j in (i - 1, i) if 0 <= j < len(_ROWS[r + 1])]
            out[ch] = "".join(sorted(near))
    return out


KEYBOARD = _keyboard_neighbours()


def _char_edit(word: str, kind: str, rng: random.Random) -> str:
    if kind == "char_swap":
        spots = [i for i in range(len(word) - 1) if word[i] != word[i + 1]]
        if not spots:
            return word
        i = rng.choice(spots)
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    if kind == "char_insert":
        i = rng.randrange(len(word) + 1)
        ch = rng.choice(string.ascii_lowercase)
        return word[:i] + (ch.upper() if word.isupper() else ch) + word[i:]
    if kind == "char_delete":
        i = rng.randrange(len(word))
        return word[:i] + word[i + 1:]
    i = rng.randrange(len(word))  # char_keyboard
    ch = rng.choice(KEYBOARD[word[i].lower()])
    return word[:i] + (ch.upper() if word[i].isupper() else ch) + word[i + 1:]


def _char_level(text: str, kind: str, rate: float, rng: random.Random) -> str:
    parts = _WORD.split(text)
    eligible = [i for i in range(1, len(parts), 2) if len(parts[i]) >= 3 and parts[i].isascii()
                and parts[i].isalpha()]
    for i in sorted(rng.sample(eligible, _how_many(rate, len(eligible)))):
        parts[i] = _char_edit(parts[i], kind, rng)
    return "".join(parts)


# --- word level -----------------------------------------------------------------------------------

def _word_level(text: str, kind: str, rate: float, rng: random.Random) -> str:
    parts = _WORD.split(text)
    words = list(range(1, len(parts), 2))
    n = _how_many(rate, len(words))
    if kind == "word_synonym":
        eligible = [i for i in words if parts[i].lower() in SYNONYMS]
        for i in sorted(rng.sample(eligible, min(n, len(eligible)))):
            new = _case_like(parts[i], rng.choice(SYNONYMS[parts[i].lower()]))
            parts[i] = new
            if i >= 3 and parts[i - 2].lower() in ("a", "an") and parts[i - 1].isspace():
                article = "an" if new[0].lower() in "aeiou" else "a"
                parts[i - 2] = _case_like(parts[i - 2], article)
    elif kind == "word_delete":
        # Keep at least one word: an empty message is a different test, not a perturbation.
        for i in sorted(rng.sample(words, max(0, min(n, len(words) - 1))), reverse=True):
            parts[i] = ""
            if parts[i + 1][:1].isspace():
                parts[i + 1] = parts[i + 1][1:]
            elif parts[i - 1][-1:].isspace():
                parts[i - 1] = parts[i - 1][:-1]
    elif kind == "word_repeat":
        for i in rng.sample(words, n):
            parts[i] = f"{parts[i]} {parts[i]}"
    else:  # word_swap: neighbours separated by spaces only
        pairs = [i for i in words[:-1] if parts[i + 1].isspace()]
        rng.shuffle(pairs)
        used: set[int] = set()
        done = 0
        for i in pairs:
            if done == n:
                break
            if i in used or i + 2 in used:
                continue
            parts[i], parts[i + 2] = parts[i + 2], parts[i]
            used.update((i, i + 2))
            done += 1
    return "".join(parts)


# --- sentence level -------------------------------------------------------------------------------

# A sentence ends at . ! ? or an ellipsis followed by whitespace, or at a line break.
_SENTENCE_GAP = re.compile(r"((?<=[.!?…])\s+|\s*\n\s*)")
# A sentence opening with one of these leans on the previous one and moves with it.
_LINKING = {"and", "but", "so", "because", "then", "also", "however", "although", "though", "or", "plus",
            "yet", "still", "which", "therefore", "anyway", "besides", "otherwise", "instead", "meanwhile",
            "afterwards", "later", "thus", "hence", "since", "too", "even"}


def _split_sentences(text: str) -> tuple[str, list[str], list[str], str]:
    """(leading space, sentences, the gaps between them, trailing space)."""
    core = text.strip()
    lead = text[: len(text) - len(text.lstrip())]
    trail = text[len(text.rstrip()):]
    pieces = _SENTENCE_GAP.split(core) if core else []
    return lead, pieces[0::2], pieces[1::2], trail


def _insert_irrelevant(text: str, count: int, rng: random.Random) -> str:
    lead, sents, gaps, trail = _split_sentences(text)
    # A text written one sentence per line gets its new sentences on lines of their own.
    joint = "\n" if gaps and all("\n" in g for g in gaps) else " "
    for extra in rng.sample(IRRELEVANT_SENTENCES, count):
        j = rng.randrange(len(sents) + 1)
        sents.insert(j, extra)
        gaps.insert(min(j, len(gaps)), joint)
    body = "".join(s + g for s, g in zip(sents, gaps + [""]))
    return lead + body + trail


def _shuffle_sentences(text: str, rate: float, rng: random.Random) -> str:
    lead, sents, gaps, trail = _split_sentences(text)
    blocks: list[list[int]] = []
    for i, s in enumerate(sents):
        first = _WORD.search(s)
        if blocks and first is not None and first.start() == 0 and first.group(1).lower() in _LINKING:
            blocks[-1].append(i)
        else:
            blocks.append([i])
    if len(blocks) < 2:
        return text
    texts = ["".join(sents[i] + (gaps[i] if i != b[-1] else "") for i in b) for b in blocks]
    outer = [gaps[b[-1]] for b in blocks[:-1]]  # gaps between blocks stay where they are
    # A window of neighbouring blocks is put in a new order (never the old one).
    width = min(len(blocks), max(2, math.ceil(rate * len(blocks))))
    start = rng.randrange(len(blocks) - width + 1)
    order = list(range(width))
    while order == sorted(order):
        rng.shuffle(order)
    texts[start:start + width] = [texts[start + i] for i in order]
    return lead + "".join(t + g for t, g in zip(texts, outer + [""])) + trail


# --------------------------------------------------------------------------------------------------
# Project-authored data. Neutral everyday sentences with no bearing on anyone's problem.

IRRELEVANT_SENTENCES = [
    "The weather was grey and windy this afternoon.",
    "My neighbour repainted his front door last weekend.",
    "There is a new bakery two streets away from my flat.",
    "The train was ten minutes late this morning.",
    "I watched a documentary about octopuses yesterday.",
    "The library closes early on Sundays.",
    "Someone left a blue umbrella at the bus stop.",
    "My phone needs a software update.",
    "The supermarket moved the cereal to a different aisle.",
    "There were a lot of pigeons in the park today.",
    "I bought a new pair of socks on Tuesday.",
    "The kettle in our kitchen is quite loud.",
    "A film about space travel came out last month.",
    "The road outside was resurfaced over the summer.",
    "My cousin collects old postcards.",
    "The clocks go forward next weekend.",
    "I had pasta for lunch.",
    "The lift in my building was being serviced.",
    "There is a crossword in the newspaper every day.",
    "The garden centre had a sale on tulip bulbs.",
    "The moon was very bright last night.",
    "The printer at the office ran out of toner.",
    "A squirrel ran across the road in front of me.",
    "The café on the corner changed its opening hours.",
]

# Synonyms of words common in emotional-support and mental-health posts, chosen so that the replacement
# fits the same slot in a sentence (same part of speech and inflection). Words with a very different
# second use (like, mean, kind, work, feel, just) are left out on purpose.
_SYNONYM_TABLE = """
sad: unhappy, down, sorrowful
unhappy: sad, miserable, discontented
happy: glad, cheerful, content
glad: happy, pleased, relieved
depressed: low, downcast, despondent
anxious: nervous, worried, uneasy
nervous: anxious, jittery, tense
worried: concerned, anxious, troubled
scared: afraid, frightened, fearful
afraid: scared, frightened, fearful
frightened: scared, afraid, terrified
terrified: petrified, horrified, frightened
angry: furious, cross, irate
upset: distressed, troubled, hurt
annoyed: irritated, bothered, irked
irritated: annoyed, irked, aggravated
frustrated: exasperated, annoyed, fed up
lonely: isolated, lonesome, alone
isolated: alone, cut off, secluded
tired: exhausted, weary, worn out
exhausted: drained, worn out, spent
stressed: tense, strained, overwhelmed
overwhelmed: swamped, overloaded, snowed under
hopeless: despairing, desperate, defeated
helpless: powerless, defenceless, lost
confused: puzzled, unsure, bewildered
ashamed: embarrassed, humiliated, mortified
embarrassed: ashamed, awkward, humiliated
guilty: remorseful, regretful, sorry
jealous: envious, resentful, covetous
calm: relaxed, peaceful, composed
relaxed: calm, at ease, rested
miserable: wretched, unhappy, dejected
desperate: hopeless, despairing, frantic
furious: enraged, livid, irate
tense: strained, on edge, uptight
devastated: crushed, shattered, heartbroken
heartbroken: devastated, crushed, brokenhearted
disappointed: let down, dismayed, disheartened
discouraged: disheartened, demoralised, deflated
insecure: unsure, uncertain, self-doubting
awkward: uncomfortable, clumsy, uneasy
uncomfortable: uneasy, awkward, ill at ease
comfortable: at ease, relaxed, cosy
confident: sure, self-assured, assured
shy: timid, reserved, bashful
bitter: resentful, embittered, sour
resentful: bitter, aggrieved, indignant
empty: hollow, vacant, void
numb: deadened, unfeeling, blank
hopeful: optimistic, positive, encouraged
positive: optimistic, upbeat, hopeful
negative: pessimistic, gloomy, downbeat
grateful: thankful, appreciative, obliged
thankful: grateful, appreciative, obliged
proud: pleased, gratified, satisfied
bored: uninterested, restless, weary
ignored: neglected, overlooked, disregarded
rejected: turned down, spurned, rebuffed
betrayed: deceived, let down, double-crossed
abandoned: deserted, forsaken, left behind
trapped: stuck, cornered, confined
stuck: trapped, bogged down, cornered
motivated: driven, inspired, energised
fine: okay, alright, well
okay: fine, alright, all right
alright: okay, fine, all right
good: fine, nice, decent
bad: awful, terrible, poor
great: wonderful, excellent, terrific
terrible: awful, horrible, dreadful
awful: terrible, horrible, dreadful
horrible: awful, terrible, dreadful
awesome: great, fantastic, amazing
amazing: wonderful, incredible, fantastic
wonderful: great, marvellous, lovely
fantastic: great, wonderful, terrific
lovely: nice, pleasant, delightful
nice: pleasant, lovely, agreeable
perfect: ideal, flawless, excellent
hard: difficult, tough, rough
difficult: hard, tough, challenging
tough: hard, difficult, rough
easy: simple, effortless, straightforward
important: significant, crucial, vital
serious: grave, severe, significant
big: large, huge, major
small: little, minor, slight
huge: enormous, massive, vast
whole: entire, complete, full
normal: usual, ordinary, typical
strange: odd, weird, peculiar
weird: strange, odd, bizarre
different: distinct, dissimilar, unlike
sure: certain, positive, confident
certain: sure, positive, confident
unsure: uncertain, doubtful, undecided
uncertain: unsure, doubtful, undecided
true: correct, accurate, right
sick: ill, unwell, poorly
ill: sick, unwell, poorly
healthy: well, fit, sound
busy: occupied, swamped, hectic
quiet: silent, calm, peaceful
loud: noisy, booming, deafening
scary: frightening, terrifying, alarming
strong: tough, resilient, sturdy
weak: frail, feeble, fragile
helpful: useful, valuable, beneficial
useful: helpful, handy, valuable
useless: worthless, pointless, futile
pointless: useless, futile, meaningless
worthless: useless, valueless, no good
caring: kind, compassionate, thoughtful
supportive: encouraging, helpful, caring
gentle: kind, mild, soft
honest: truthful, sincere, frank
distant: remote, aloof, detached
toxic: harmful, poisonous, damaging
abusive: cruel, violent, harmful
rude: impolite, disrespectful, insulting
unfair: unjust, unreasonable, undeserved
annoying: irritating, bothersome, tiresome
boring: dull, tedious, monotonous
interesting: engaging, fascinating, intriguing
beautiful: lovely, gorgeous, pretty
smart: clever, bright, intelligent
stupid: foolish, silly, dumb
silly: foolish, daft, stupid
lazy: idle, sluggish, unmotivated
safe: secure, protected, sheltered
dangerous: risky, unsafe, hazardous
impossible: hopeless, unachievable, unworkable
possible: feasible, achievable, doable
ready: prepared, set, willing
willing: ready, prepared, inclined
expensive: costly, pricey, dear
cheap: inexpensive, affordable, low-cost
rich: wealthy, affluent, well-off
wealthy: rich, affluent, well-off
unemployed: jobless, out of work, between jobs
stressful: demanding, taxing, nerve-racking
exhausting: draining, tiring, wearing
tiring: exhausting, draining, wearying
upsetting: distressing, troubling, disturbing
painful: hurtful, agonising, distressing
disappointing: discouraging, dispiriting, unsatisfying
really: truly, genuinely, very
very: extremely, really, truly
quite: rather, fairly, pretty
extremely: very, incredibly, exceptionally
incredibly: extremely, remarkably, unbelievably
always: constantly, forever, all the time
often: frequently, regularly, repeatedly
sometimes: occasionally, at times, now and then
maybe: perhaps, possibly
perhaps: maybe, possibly
probably: likely, most likely, presumably
recently: lately, of late
lately: recently, of late
suddenly: abruptly, all of a sudden, unexpectedly
completely: totally, entirely, utterly
totally: completely, entirely, utterly
especially: particularly, notably, specially
actually: really, in fact, truly
honestly: frankly, truthfully, genuinely
definitely: certainly, surely, absolutely
absolutely: completely, totally, definitely
basically: essentially, fundamentally
usually: normally, typically, generally
mostly: largely, mainly, chiefly
quickly: rapidly, swiftly, fast
slowly: gradually, sluggishly
soon: shortly, before long, presently
finally: eventually, at last
currently: presently, at the moment
also: additionally, as well
however: nonetheless, nevertheless, still
because: since, as
although: though, even though
anyway: anyhow, regardless
again: once more, anew
friend: pal, buddy, companion
friends: pals, buddies, companions
partner: companion, significant other, mate
boyfriend: partner
girlfriend: partner
husband: spouse, partner
wife: spouse, partner
parents: folks, mother and father
mom: mother, mum
mum: mother, mom
dad: father
mother: mom, mum
father: dad
family: relatives, kin, household
kids: children, little ones
children: kids, little ones
child: kid, youngster
baby: infant, newborn
people: folks, individuals
everyone: everybody
everybody: everyone
someone: somebody
somebody: someone
anyone: anybody
nobody: no one
boss: manager, supervisor, employer
manager: boss, supervisor
colleague: coworker, associate
colleagues: coworkers, associates
coworker: colleague
coworkers: colleagues
job: position, post, role
career: profession, vocation, occupation
company: firm, business, employer
salary: pay, wages, income
income: earnings, salary, pay
money: cash, funds, finances
bills: expenses, payments
expenses: costs, outgoings, bills
house: home, place
home: house, place
problem: issue, difficulty, trouble
problems: issues, difficulties, troubles
issue: problem, matter, concern
issues: problems, matters, concerns
situation: circumstance, position, predicament
things: matters, affairs
life: existence, living
idea: notion, thought, concept
thoughts: ideas, notions, reflections
feelings: emotions, sentiments
emotions: feelings, sentiments
fear: dread, worry
pain: hurt, suffering, ache
stress: pressure, strain, tension
pressure: stress, strain, tension
anxiety: worry, unease, nervousness
depression: despondency, low mood, melancholy
sadness: sorrow, unhappiness, grief
anger: rage, fury, irritation
grief: sorrow, mourning, heartache
advice: guidance, counsel, suggestions
therapist: counsellor, counselor
counselor: therapist, counsellor
counsellor: therapist, counselor
therapy: counselling, treatment
doctor: physician, medic
medication: medicine, meds, pills
pills: tablets, medication
treatment: therapy, care, remedy
illness: sickness, disease, ailment
symptoms: signs, indications
recovery: healing, recuperation, improvement
progress: improvement, headway, advancement
health: wellbeing, well-being
mental: psychological, emotional
mood: spirits, frame of mind
energy: vigour, strength, drive
motivation: drive, energy, will
confidence: self-belief, assurance, self-assurance
chance: opportunity, possibility
opportunity: chance, opening
choice: option, alternative
decision: choice, judgement
reason: cause, motive
mistake: error, blunder, slip
mistakes: errors, blunders, slips
failure: flop, disappointment, letdown
success: achievement, triumph
relationship: bond, partnership, connection
marriage: partnership, union
argument: quarrel, row, dispute
arguments: quarrels, rows, disputes
breakup: split, separation
divorce: separation, split
pandemic: outbreak, epidemic
lockdown: quarantine, confinement
goal: aim, target, objective
goals: aims, targets, objectives
purpose: meaning, aim, point
meaning: significance, sense, purpose
memories: recollections, reminders
conversation: talk, discussion, chat
discussion: conversation, talk, debate
phone: telephone, mobile
university: college, uni
college: university, school
student: pupil, learner
students: pupils, learners
grades: marks, results, scores
exam: test, examination
exams: tests, examinations
homework: assignments, coursework
deadline: due date, cutoff
deadlines: due dates, cutoffs
degree: qualification, diploma
holiday: vacation, break
vacation: holiday, break, trip
trip: journey, outing, excursion
party: gathering, celebration, get-together
hobby: pastime, interest
hobbies: pastimes, interests
session: meeting, appointment
appointment: session, meeting
death: passing, loss, demise
nightmares: bad dreams
hello: hi, hey
hi: hello, hey
yes: yeah, yep
yeah: yes, yep
bye: goodbye, farewell
talk: chat, speak
speak: talk, chat
said: stated, mentioned, remarked
told: informed
want: wish, desire
wanted: wished, desired
wants: wishes, desires
need: require
needed: required
try: attempt
tried: attempted
trying: attempting, striving
tries: attempts
start: begin, commence
started: began, commenced
begin: start, commence
stop: quit, cease, halt
stopped: quit, ceased, halted
hate: detest, loathe, despise
love: adore, cherish
enjoy: relish, appreciate
enjoyed: relished, appreciated
understand: comprehend, grasp, see
understood: comprehended, grasped
believe: think, trust
cope: deal, manage
handle: manage, tackle
manage: handle, cope
struggle: battle, strive, flounder
struggling: battling, floundering, labouring
cry: weep, sob
crying: weeping, sobbing
cried: wept, sobbed
argue: quarrel, bicker
fighting: quarrelling, arguing, bickering
yelled: shouted, screamed
yelling: shouting, screaming
shouting: yelling, screaming
fired: dismissed, sacked, let go
relax: unwind, calm down
help: aid, support
appreciate: value, welcome
remember: recall, recollect
realized: recognized, understood, saw
noticed: observed, spotted, saw
decided: chose, resolved, determined
happened: occurred, took place, came about
happen: occur, take place
seem: appear
seems: appears
seemed: appeared
bothers: troubles, disturbs
bothered: troubled, disturbed
hurts: aches, stings
sleep: rest, slumber
moved: relocated
died: passed away, passed on
grieving: mourning, sorrowing
lied: fibbed
"""

SYNONYMS: dict[str, list[str]] = {
    head.strip(): [w.strip() for w in rest.split(",")]
    for head, _, rest in (ln.partition(":") for ln in _SYNONYM_TABLE.strip().splitlines())
}
