"""The texts of the ``persona`` scenario, in English and Chinese."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ctxwindow.eval.builtin._text import Slots, _lines, _split, _Talk, _talk, _topics


@dataclass(frozen=True)
class _PersonaText:
    system: str
    values: Slots
    statements: Mapping[str, Sequence[str]]  # fact -> what the user says
    acks: Mapping[str, Sequence[str]]  # fact -> the assistant's reply, which never repeats it
    restaurants: Sequence[str]
    safe: str
    unsafe: Sequence[str]
    neutral: Sequence[str]
    list_asks: Sequence[str]
    list_reply: tuple[str, str, str]  # intro, line per restaurant, outro
    comma: str  # between the city names of the request
    questions: Mapping[str, str]
    talk: _Talk


_PERSONA_EN = _PersonaText(
    system="You are a friendly, thoughtful assistant. Remember what the user tells you about "
    "themselves and use it when it helps.",
    values={
        "name": _split("Dana, Priya, Marco, Sofia, Tom, Hannah, Lucas, Aisha"),
        "city": _split(
            "Lisbon, Toronto, Melbourne, Edinburgh, Austin, Copenhagen, Wellington, Seattle"
        ),
        "landmark": _split(
            "the old harbour, the botanical garden, the main station, the university, the river"
        ),
        "job": _split(
            "paediatric nurse, landscape architect, chemistry teacher, data analyst, "
            "sound engineer, veterinary surgeon, bakery owner"
        ),
        "allergen": _split("peanuts, shellfish, sesame, kiwi, mustard"),
        "food": _split(
            "mushroom risotto, lamb tagine, margherita pizza, pho, spinach lasagna, fish tacos"
        ),
        "pet_kind": _split("dog, cat"),
        "pet": _split("Biscuit, Pepper, Mochi, Juniper, Waffles, Ziggy, Olive"),
        "pet_food": _split("chicken, beef, dairy, wheat, salmon"),
    },
    statements={
        "name": _lines("""
            Hi! I'm {name}. I figured I'd introduce myself since we'll probably chat a lot.
            Hello, my name is {name}. Nice to finally try this out.
        """),
        "city": _lines("""
            I live in {city}, in a small flat near {landmark}.
            I moved to {city} a few years ago and I'm still discovering it.
        """),
        "job": _lines("""
            I work as a {job}, so my weeks can get pretty hectic.
            By day I'm a {job}. It's tiring, but I love it.
        """),
        "allergen": _lines("""
            Something important: I'm allergic to {allergen}, so please keep that in mind whenever
              food comes up.
            Just so you know, I can't eat {allergen}. I'm allergic, and it's fairly serious.
        """),
        "food": _lines("""
            If I could eat one thing forever, it would be {food}.
            My favourite food is {food}, no contest.
        """),
        "pet": _lines("""
            I have a {pet_kind} called {pet}, who is basically the boss of the house.
            My {pet_kind}, {pet}, is sitting on my feet as I type this.
        """),
        "birthday": _lines("""
            My birthday is on {birthday}, and I never know how to celebrate it.
            Fun fact: my birthday is {birthday}. Ideas for a low-key celebration are welcome.
        """),
        "vet": _lines("""
            {pet} was unwell again last night. The vet says no more {pet_food} from now on; it was
              in the treats.
            Back from the vet with {pet}. Verdict: an intolerance, so {pet_food} is off the menu for
              good.
        """),
        "trip": _lines("""
            Work is sending me to {trip_city} from {trip_start} to {trip_end} for a conference.
            I just booked my trip: I'll be in {trip_city} from {trip_start} until {trip_end}.
        """),
    },
    acks={
        "name": ["Lovely to meet you! I'm happy to help with whatever you have in mind."],
        "city": [
            "That sounds like a nice place to live.",
            "Nice! It's fun to get to know a place.",
        ],
        "job": ["That sounds demanding. I hope you get some proper breaks."],
        "allergen": ["Thanks for telling me. I'll keep it in mind for anything food-related."],
        "food": ["Great choice, that's hard to beat.", "Good taste! That's a classic."],
        "pet": ["Sounds like a real character!", "Every home needs a boss like that."],
        "birthday": ["A quiet dinner with a few close friends is always a good option."],
        "vet": ["Poor thing. I hope the new diet helps quickly."],
        "trip": ["That sounds busy but interesting. Remember to pack something comfortable."],
    },
    restaurants=_split(
        "Casa Verde, The Copper Pot, Little Saigon Kitchen, Olive & Thyme, Harbor Lights, "
        "Blue Lantern, Saffron Room, Nori House, Field & Fork, Juniper Table"
    ),
    safe="nothing on the menu contains {allergen}, and the staff are careful about it",
    unsafe=_lines("""
        almost every dish is cooked with {allergen}
        their signature dish is full of {allergen}
        great food, but {allergen} is in most of the sauces
    """),
    neutral=_lines("""
        lovely for a long brunch
        small and cosy, book ahead
        the best grilled fish in town
        a vegetarian tasting menu worth trying
        open late and good for groups
    """),
    list_asks=_lines("""
        I'm putting together restaurant tips for friends who are travelling around {list_cities}.
          Could you suggest a few places in each?
        Friends are visiting {list_cities} next month. Any restaurant recommendations for them?
    """),
    list_reply=(
        "Here are some places worth a visit:",
        "- {name} ({city}): {note}.",
        "I hope your friends enjoy them!",
    ),
    comma=", ",
    questions={
        "name": "What's my name?",
        "city": "Which city do I live in?",
        "job": "What do I do for a living?",
        "allergen": "What am I allergic to?",
        "food": "What's my favourite food?",
        "pet": "What's my {pet_kind}'s name?",
        "birthday": "When is my birthday?",
        "restaurant": "Which restaurant from your list is in my city and safe for me to eat at, "
        "given my allergy?",
        "pet_food": "What food does my {pet_kind} have to avoid now?",
        "trip_city": "Which city will I be in on my birthday?",
    },
    talk=_talk(
        "en",
        _topics("""
            A library card is still one of the best deals around.
            ? Can you recommend a good {genre} novel?
            A good {genre} novel pulls you in within the first few chapters, so give a new one a
              fair try.
            Browsing the staff picks in a local bookshop is a great way to find one.
            Keeping a short list of books to read next makes it easier to start.
            ? How can I make more time to read?
            Reading twenty minutes before bed adds up to a surprising number of books.
            Audiobooks are great for commutes and long walks.
            It's fine to abandon a book that isn't working for you.

            ? Any series worth watching this month?
            Limited series are a nice choice when you don't want a huge commitment.
            Critics and audiences often disagree, so trailers are a better guide.
            Subtitles help a lot with fast dialogue.
            ? Is it worth rewatching old {genre} films?
            Definitely: rewatching a favourite often shows you details you missed the first time.
            A film night with friends makes even an average {genre} film fun.

            Early starts mean quieter trails and cooler temperatures.
            ? I want to start hiking. Where do I begin?
            Start with short, well-marked trails and build up slowly.
            Good shoes matter more than any other piece of gear.
            Local hiking groups are a friendly way to learn the routes.
            ? What should I pack for a day hike?
            Pack water, a snack, a light jacket and a charged phone.
            A simple offline map app is a good safety net.
            Tell someone where you're going and when you expect to be back.

            ? How do I get better at cooking without recipes?
            Learning a few basic techniques matters more than collecting recipes.
            Taste as you go and adjust the salt and acidity at the end.
            Roasting vegetables at a high heat brings out a lot of flavour.
            Keeping a few sauces in the fridge makes quick meals more interesting.
            Cooking a big batch on Sunday makes weekday evenings easier.
            ? What knife should a home cook own?
            One good chef's knife and a sharpener cover most tasks.
            A small paring knife and a bread knife are nice extras, but not essential.

            Small, steady progress is easier to keep up than big jumps.
            ? How many times a week should I {exercise}?
            Two or three sessions a week is a realistic place to start.
            Rest days are part of the training, not a break from it.
            ? I keep skipping workouts. Any tips?
            Consistency beats intensity, especially in the first few months.
            Scheduling workouts like meetings makes them harder to skip.
            Finding a friend to train with makes it more fun.

            Don't worry about mistakes; they are how you learn.
            ? I'm trying to learn {language}. How should I practise?
            Fifteen minutes every day works better than two hours once a week.
            Listening to podcasts in {language} trains your ear without much effort.
            Labelling things around the house is an old trick that still works.
            ? Are language apps enough?
            Apps are a good start, but speaking with people is what builds confidence.
            A weekly conversation exchange, even online, makes a big difference.

            Most plants prefer bright, indirect light.
            ? My {plant} keeps drooping. What am I doing wrong?
            Overwatering is the most common problem with houseplants.
            Check that the pot drains well and let the top of the soil dry out.
            Yellow leaves often mean too much water rather than too little.
            Turning the pot every week keeps growth even.
            ? Which houseplants are hard to kill?
            Snake plants and pothos are famously forgiving.
            A ZZ plant also copes well with low light and the occasional forgotten watering.

            ? How do I stay focused when working from home?
            A fixed start time and a short walk before work create a sense of routine.
            Working in focused blocks with short breaks helps a lot.
            Putting the phone in another room removes the biggest distraction.
            A weekly plan on paper keeps the big tasks visible.

            ? Any tips for a tidier flat?
            Ten minutes of tidying every evening keeps things under control.
            Everything needs a home; clutter is mostly things without one.
            A box by the door for things that need to leave the house helps more than you'd think.
        """),
        ["Good question!", "Oh, I like this one.", "Happy to share some ideas."],
        {
            "genre": _split("mystery, science fiction, historical, fantasy, romance"),
            "exercise": _split("run, swim, cycle, do yoga, lift weights"),
            "language": _split("Spanish, Japanese, German, Italian, Korean"),
            "plant": _split("monstera, fiddle-leaf fig, basil, peace lily"),
        },
    ),
)

_PERSONA_ZH = _PersonaText(
    system="你是一个友好、贴心的助手。请记住用户告诉你的个人信息，并在合适的时候用上。",
    values={
        "name": _split("林晓雨、陈思远、王可欣、张子涵、刘一帆、赵雅琪、周明轩、吴佳怡"),
        "city": _split("杭州、成都、苏州、厦门、青岛、武汉、西安、南京"),
        "landmark": _split("老城区、植物园、火车站、大学城、江边"),
        "job": _split(
            "儿科护士、景观设计师、中学化学老师、数据分析师、录音师、宠物医生、面包店老板"
        ),
        "allergen": _split("花生、虾、芝麻、芒果、猕猴桃"),
        "food": _split("酸菜鱼、小笼包、煲仔饭、牛肉面、糖醋排骨、番茄炒蛋"),
        "pet_kind": _split("狗、猫"),
        "pet": _split("年糕、豆豆、可乐、汤圆、布丁、雪球、奶茶"),
        "pet_food": _split("鸡肉、牛肉、奶制品、小麦、三文鱼"),
    },
    statements={
        "name": _lines("""
            你好！我叫{name}，以后可能会常来找你聊天，先自我介绍一下。
            嗨，我是{name}，第一次用，请多关照。
        """),
        "city": _lines("""
            我住在{city}，家就在{landmark}附近。
            我几年前搬到了{city}，到现在还在慢慢熟悉这座城市。
        """),
        "job": _lines("""
            我是一名{job}，平时工作挺忙的。
            我白天的工作是{job}，挺累的，但我很喜欢。
        """),
        "allergen": _lines("""
            有件事很重要：我对{allergen}过敏，以后聊到吃的请一定记得。
            提前说一下，我不能吃{allergen}，过敏，而且还挺严重的。
        """),
        "food": _lines("""
            要是只能吃一样东西，我选{food}。
            我最喜欢吃的就是{food}，没有之一。
        """),
        "pet": _lines("""
            我养了一只{pet_kind}，叫{pet}，在家里基本是老大。
            我家{pet_kind}{pet}这会儿正趴在我脚边呢。
        """),
        "birthday": _lines("""
            我的生日是{birthday}，每年都不知道该怎么过。
            说个小事：我生日是{birthday}，有什么低调的庆祝点子欢迎推荐。
        """),
        "vet": _lines("""
            {pet}昨晚又不舒服了。兽医说以后不能再吃{pet_food}了，零食里就有这个。
            刚带{pet}看完兽医，结论是不耐受，{pet_food}以后彻底不能碰了。
        """),
        "trip": _lines("""
            单位派我去{trip_city}开会，{trip_start}出发，{trip_end}回来。
            行程刚订好：{trip_start}到{trip_end}我都在{trip_city}。
        """),
    },
    acks={
        "name": ["很高兴认识你！有什么想聊的、想问的，尽管说。"],
        "city": ["听起来是个很宜居的地方。", "不错呀，慢慢逛总能发现新去处。"],
        "job": ["听起来很辛苦，记得给自己留出休息的时间。"],
        "allergen": ["谢谢提醒，以后聊到吃的我都会注意。"],
        "food": ["好眼光，这个确实让人吃不腻。", "懂吃！这可是经典。"],
        "pet": ["听起来是个很有个性的小家伙！", "每个家里都需要这样一位老大。"],
        "birthday": ["约上几个好朋友安安静静吃顿饭，永远是个不错的选择。"],
        "vet": ["小可怜，希望换了饮食之后很快就好起来。"],
        "trip": ["听起来会很忙，但也挺有意思的。记得带几件舒服的衣服。"],
    },
    restaurants=_split(
        "知味小馆、老灶台、山野食堂、青禾餐厅、南巷面馆、半日闲茶餐厅、渔火小厨、拾味居、"
        "云间小院、巷口私房菜"
    ),
    safe="菜单上没有任何含{allergen}的菜，店员也很注意过敏问题",
    unsafe=_lines("""
        几乎每道菜都用到了{allergen}
        招牌菜里放了很多{allergen}
        味道很好，但大部分酱汁里都有{allergen}
    """),
    neutral=_lines("""
        适合周末慢慢吃个早午餐
        店面不大但很温馨，最好提前订位
        城里烤鱼做得最好的一家
        素食套餐值得一试
        营业到很晚，适合聚餐
    """),
    list_asks=_lines("""
        我在帮要去{list_cities}玩的朋友整理餐厅推荐，每个城市能推荐几家吗？
        下个月有朋友要去{list_cities}，你能帮他们推荐几家餐厅吗？
    """),
    list_reply=("这几家都值得一去：", "- {name}（{city}）：{note}。", "希望你的朋友们吃得开心！"),
    comma="、",
    questions={
        "name": "我叫什么名字？",
        "city": "我住在哪个城市？",
        "job": "我是做什么工作的？",
        "allergen": "我对什么过敏？",
        "food": "我最喜欢吃什么？",
        "pet": "我家{pet_kind}叫什么名字？",
        "birthday": "我的生日是哪天？",
        "restaurant": "你推荐的餐厅里，哪一家在我住的城市，而且考虑到我的过敏，我可以放心去吃？",
        "pet_food": "我家{pet_kind}现在不能吃什么？",
        "trip_city": "我过生日那天会在哪个城市？",
    },
    talk=_talk(
        "zh",
        _topics("""
            办一张图书馆的借书证，真的非常划算。
            ? 能推荐一本好看的{genre}小说吗？
            好的{genre}小说，往往前几章就能把人吸引住，新书可以多给它一点耐心。
            去书店逛逛店员推荐的书架，常常能发现惊喜。
            列一个“下一本读什么”的小清单，开始读新书会容易很多。
            ? 平时怎么才能挤出时间看书？
            每天睡前读二十分钟，一年下来能读完不少书。
            通勤或者散步的时候听有声书也很不错。
            读不下去的书放下也没关系，不必勉强自己。

            ? 这个月有什么值得追的剧吗？
            不想投入太多时间的话，可以选短一点的迷你剧。
            影评人和观众的口味经常不一样，看看预告片反而更靠谱。
            对白节奏快的片子，开着字幕会轻松很多。
            ? 老的{genre}电影值得重看吗？
            当然值得，重看喜欢的作品，常常能发现第一次没注意到的细节。
            和朋友一起看，哪怕是普通的{genre}片也会很有意思。

            早点出发，人少，天气也凉快。
            ? 我想开始徒步，应该从哪儿入手？
            先从路线清晰、距离较短的步道开始，慢慢加量。
            一双合脚的鞋比其他任何装备都重要。
            跟着本地的徒步群走几次，很快就能熟悉路线。
            ? 一天的短途徒步要带些什么？
            带上水、零食、一件薄外套，手机记得充满电。
            手机里装一个离线地图，关键时刻很管用。
            出发前告诉家人或朋友你去哪儿、大概几点回来。

            ? 不看菜谱的话，怎么提高做饭水平？
            掌握几种基本做法，比收藏一堆菜谱更有用。
            边做边尝，最后再调整咸淡和酸度。
            蔬菜用高温烤一烤，香味会出来很多。
            冰箱里常备几种酱料，快手菜也能做出花样。
            周末提前备好一批菜，工作日晚上会轻松很多。
            ? 家里做饭需要备一把什么样的刀？
            一把好用的主厨刀再加一个磨刀器，基本就够用了。
            再有一把小水果刀和面包刀更好，但不是必需的。

            小步慢慢进步，比一下子加很多更容易坚持。
            ? 一周{exercise}几次比较合适？
            刚开始每周两三次是比较现实的目标。
            休息日也是训练的一部分，不算偷懒。
            ? 我老是坚持不了锻炼，有什么办法吗？
            坚持比强度重要，尤其是在头几个月。
            把锻炼像开会一样写进日程，就不容易找借口跳过。
            找个朋友一起练，会有意思得多。

            别怕犯错，犯错本来就是学习的一部分。
            ? 我在学{language}，平时该怎么练？
            每天练十五分钟，比一周集中学两个小时效果好。
            平时听听{language}播客，不费力气就能练耳朵。
            在家里的东西上贴标签，这个老办法到现在还很管用。
            ? 只用学语言的 App 够吗？
            App 适合入门，但真正建立信心还得多开口和人说。
            每周找人做一次语言交换，哪怕是线上的，进步也会快很多。

            大多数植物喜欢明亮的散射光。
            ? 我的{plant}叶子老是耷拉着，是哪里没养对？
            养绿植最常见的问题其实是浇水太多。
            检查一下花盆排水好不好，等表层土干了再浇。
            叶子发黄往往是水浇多了，而不是浇少了。
            每周把花盆转个方向，植株会长得更均匀。
            ? 有哪些绿植特别好养？
            虎尾兰和绿萝出了名的皮实。
            金钱树也很耐阴，偶尔忘了浇水也没关系。

            ? 在家办公总是没法专心怎么办？
            固定上班时间，开工前出门走一小圈，会更有仪式感。
            分段专注工作、中间短暂休息，效果会好很多。
            把手机放到另一个房间，最大的干扰就没了。
            每周在纸上列个计划，重要的事情就不会被忘掉。

            ? 有什么让家里保持整洁的小技巧？
            每天晚上花十分钟收拾一下，家里就不容易乱。
            每样东西都要有固定的位置，杂乱大多是东西没有“家”。
            在门口放个箱子，专门放要带出门处理的东西，比想象中好用。
        """),
        ["好问题！", "这个我喜欢聊。", "给你分享几个想法。"],
        {
            "genre": _split("悬疑、科幻、历史、奇幻、爱情"),
            "exercise": _split("跑步、游泳、骑车、练瑜伽、撸铁"),
            "language": _split("西班牙语、日语、德语、意大利语、韩语"),
            "plant": _split("龟背竹、琴叶榕、罗勒、白掌"),
        },
    ),
)
