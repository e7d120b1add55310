"""The texts of the ``orders`` scenario, in English and Chinese."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ctxwindow.eval.builtin._text import _lines, _split, _Talk, _talk, _topics


@dataclass(frozen=True)
class _OrdersText:
    system: str
    shops: Sequence[str]
    items: Sequence[str]
    carriers: Sequence[tuple[str, str]]  # (name, tracking number pattern)
    order_pattern: str
    first_asks: Sequence[str]
    more_asks: Sequence[str]
    replies: Sequence[str]
    questions: Mapping[str, str]
    talk: _Talk


_ORDERS_EN = _OrdersText(
    system="You are Mia, a customer-service assistant for {shop}. Be concise, friendly and "
    "accurate, and never invent order data.",
    shops=_split("Northwind Home, Brightcart, Maple & Co., Harbor Goods, Lumen Living"),
    items=_split(
        "blue kettle, red backpack, wireless mouse, desk lamp, green yoga mat, ceramic teapot, "
        "Bluetooth speaker, cast-iron skillet, wool blanket, bathroom scale, "
        "bamboo cutting board, mechanical keyboard, linen bedsheet set, steel water bottle, "
        "rice cooker, coffee grinder"
    ),
    carriers=[
        ("UPS", "1Z@@@@@@##########"),
        ("FedEx", "############"),
        ("DHL Express", "##########"),
        ("USPS", "9400####################"),
    ],
    order_pattern="@-####",
    first_asks=_lines("""
        Hi! I've got a few orders with you and I'd like to check on them. First one: order {order},
          a {item}. I paid {price} for it.
        Hello, I need an update on several orders. Let's start with the {item}, order number
          {order}. It was {price}.
        Hi there. Could you look up my order {order}? It's the {item}, {price}. I have a couple more
          after that.
    """),
    more_asks=_lines("""
        Next one: order {order}, the {item}. That came to {price}.
        Could you also check order {order}? It's a {item} I bought for {price}.
        And there's the {item}: order {order}, {price} with tax.
        One more, please: order number {order}, a {item}, paid {price}.
        Also order {order}, the {item}, which was {price} on sale.
    """),
    replies=_lines("""
        Thanks! Your {item} left our warehouse on {ship} with {carrier}. The tracking number is
          {tracking}, and it should arrive by {eta}.
        Found it. The {item} was handed to {carrier} on {ship}, tracking number {tracking}. Expected
          delivery: {eta}.
        Good news: the {item} shipped on {ship} via {carrier}, tracking number {tracking}. The
          estimated delivery date is {eta}.
        The {item} is on its way. {carrier} picked it up on {ship}; you can follow it with tracking
          number {tracking}, and delivery is planned for {eta}.
    """),
    questions={
        "tracking": "What is the tracking number of my order for the {item}?",
        "order": "What was the order number of the {item}?",
        "eta": "When is the {item} expected to arrive?",
        "price": "How much did I pay for the {item}?",
        "carrier": "Which carrier is delivering the {item}?",
    },
    talk=_talk(
        "en",
        _topics("""
            You can start a return from the Orders page of your account, and the system prints a
              prepaid label for you.
            Refunds go back to the original payment method, usually within {n} business days after
              the parcel reaches our warehouse.
            Please include all accessories and manuals in the box; it speeds up the check at the
              warehouse.
            ? How long do I have to return something if it doesn't fit?
            Most items can be returned within {days} days of delivery, as long as they are unused
              and in their original packaging.
            If it's just the size, an exchange is often quicker than a return and a new order.
            ? What's your return policy for items that were on sale?
            Sale items follow the same rules as full-price ones.
            The only exception is the clearance section, where everything is final sale.
            ? If I send something back, do I pay for the return shipping?
            Returns are free for members; otherwise a small fee is taken off the refund.
            If an item arrived damaged or faulty, the return shipping is always on us.
            For bulky items we arrange a pickup instead of asking you to drop the parcel off.

            Delivery times stretch a little around public holidays, so it's worth ordering early.
            ? Do you ship to {region}?
            Yes, we ship to {region}; the checkout page shows the exact options for your address.
            Deliveries there usually take a few extra days, and import duties may apply.
            ? Is express shipping worth it?
            Standard shipping is free above a minimum basket, and express delivery adds a small flat
              fee.
            Express is mostly worth it for gifts or anything you need by a fixed date.
            ? What happens if I'm not home when the courier comes?
            Couriers usually leave a note and try again on the next working day.
            If a parcel can't be delivered after three attempts, it waits at the local depot for a
              week.
            You can pick a pickup point at checkout if daytime deliveries are awkward for you.

            All payments go through an encrypted checkout, and we never store full card numbers.
            ? Can I pay with {payment}?
            Yes, we accept {payment}, as well as the major credit cards and bank transfers.
            You can choose it on the last step of checkout.
            ? Is it possible to split a payment across two cards?
            Splitting one order across two cards isn't supported yet.
            A gift card can be combined with a card, though.
            ? Why was my card charged before anything shipped?
            What you see before shipping is an authorisation hold; the actual charge happens when
              the parcel leaves the warehouse.
            Holds disappear from your statement within a few days if an order is cancelled.
            If your bank flags a payment, approving it in your banking app usually clears it within
              minutes.

            For security, changes to your account details are confirmed by email.
            Turning on two-step sign-in is a good idea if you shop with us often.
            ? How do I change the email address on my account?
            You can change it under Account settings; we send a confirmation link to the new
              address.
            If you no longer have access to your old email, our team can verify your identity
              another way.
            ? I forgot my password, what should I do?
            The 'Forgot password' link on the sign-in page sends you a reset link that is valid for
              one hour.
            Check your spam folder if the email doesn't arrive within a few minutes.
            ? Can I have two delivery addresses saved?
            You can save as many delivery addresses as you like and choose one at checkout.
            You can also mark one of them as the default.

            Members also get early access to limited collections.
            ? Can I combine two discount codes?
            Only one discount code can be used per order, but loyalty points can be added on top.
            Codes from partner websites sometimes have their own conditions, so it's worth reading
              the small print.
            ? How do loyalty points work?
            You earn a point for every unit of currency you spend, and points can be redeemed at
              checkout.
            Points expire after twelve months without any purchase on the account.
            ? Are there any sales coming up for {season}?
            We usually run a {season} sale, and newsletter subscribers hear about it first.
            The exact dates are announced about a week in advance.

            Most products come with a care label or a leaflet with specific advice.
            A little regular care makes things last much longer than an occasional deep clean.
            ? Any tips for cleaning {material} things?
            For {material}, a soft cloth and mild soapy water are usually enough.
            Avoid harsh cleaners; they can dull the surface over time.
            Let everything dry completely before putting it away.
            ? How should I store {material} items when I'm not using them?
            A cool, dry cupboard is the best place for anything made of {material}.
            Keep them out of direct sunlight, and give them a little room so air can circulate.

            Wrapped parcels sometimes take an extra day to leave the warehouse.
            ? Do you offer gift wrapping?
            Gift wrapping is available for most items; you can select it in the basket.
            You can choose between recycled paper and a reusable fabric wrap.
            ? Can I send an order to someone else as a present?
            Yes: enter their delivery address and add a personal message at checkout.
            The person receiving the gift can exchange it without needing your receipt.
            ? Can you leave the price off the delivery note?
            Gift orders ship with a delivery note that doesn't show any prices.
            Just tick the gift option at checkout and the prices are left off automatically.
        """),
        ["Good question.", "Happy to explain.", "Thanks for asking.", "Let me explain."],
        {
            "days": ["14", "30", "45"],
            "n": ["3", "5", "7"],
            "region": _split("Canada, Ireland, the Canary Islands, Norway, Hawaii"),
            "payment": _split("PayPal, Apple Pay, Google Pay, Klarna"),
            "season": _split("the holidays, spring, back-to-school, summer"),
            "material": _split("cast-iron, linen, wool, bamboo, ceramic, stainless steel"),
        },
    ),
)

_ORDERS_ZH = _OrdersText(
    system="你是{shop}的在线客服小满。回答要简洁、友好、准确，不要编造任何订单信息。",
    shops=_split("优品家居、悦购商城、小满生活馆、禾木良品、云朵百货"),
    items=_split(
        "蓝色电热水壶、红色双肩包、无线鼠标、护眼台灯、绿色瑜伽垫、陶瓷茶壶、降噪耳机、"
        "铸铁平底锅、羊毛毯、智能体重秤、竹制砧板、机械键盘、亚麻四件套、不锈钢保温杯、"
        "电饭煲、磨豆机"
    ),
    carriers=[
        ("顺丰速运", "SF#############"),
        ("京东物流", "JDX############"),
        ("中通快递", "7#############"),
        ("圆通速递", "YT#############"),
        ("韵达快递", "43#############"),
    ],
    order_pattern="############",
    first_asks=_lines("""
        你好，我在你们这儿下了好几单，想查一下物流。先说第一单：订单号{order}，买的是{item}，
          付了{price}。
        在吗？我有几个订单想问问进度。先查{item}那单，订单号{order}，当时花了{price}。
        你好，麻烦帮我查一下订单{order}，是一个{item}，{price}。后面还有几单。
    """),
    more_asks=_lines("""
        下一单：订单号{order}，{item}，一共{price}。
        还有订单{order}也帮我看看，是{item}，{price}买的。
        另外那个{item}，订单号{order}，付了{price}，现在到哪了？
        再麻烦查一单：{order}，买的{item}，{price}。
        还有一单是{item}，订单号{order}，活动价{price}。
    """),
    replies=_lines("""
        查到了！您的{item}已于{ship}从仓库发出，承运快递是{carrier}，运单号{tracking}，
          预计{eta}送达。
        好的，{item}在{ship}交给了{carrier}，运单号是{tracking}，预计{eta}能到。
        您的{item}已经在路上啦：{ship}发货，{carrier}承运，运单号{tracking}，预计送达时间{eta}。
        帮您看了，{item}{ship}出库，走的是{carrier}，单号{tracking}，正常情况下{eta}前送到。
    """),
    questions={
        "tracking": "我买的{item}那单，快递单号是多少？",
        "order": "{item}那一单的订单号是多少？",
        "eta": "{item}预计哪天送到？",
        "price": "我买{item}花了多少钱？",
        "carrier": "{item}是哪家快递在送？",
    },
    talk=_talk(
        "zh",
        _topics("""
            您可以在“我的订单”里直接点“申请售后”，系统会帮您生成上门取件单。
            退款会原路退回，仓库收到退货后一般{n}个工作日内到账。
            退货时记得把配件、说明书和赠品一起寄回，这样审核会快一些。
            ? 衣服尺码不合适的话，多久之内可以退？
            大部分商品签收后{days}天内都可以申请无理由退货，只要不影响二次销售就行。
            如果只是尺码问题，直接申请换货通常比退了再买要快。
            ? 打折买的东西也能退吗？
            活动商品和正价商品的退货规则是一样的。
            只有清仓专区的商品是不退不换的。
            ? 退货的运费要我自己出吗？
            会员退货免运费，非会员的话会从退款里扣一点运费。
            如果收到的商品有破损或者质量问题，来回运费都由我们承担。
            大件商品我们会安排师傅上门取件，不用您自己跑快递点。

            节假日前后配送会稍微慢一点，有急用的话建议早点下单。
            ? 你们能发{region}吗？
            {region}是可以发的，具体能选哪些配送方式，下单时页面上会显示。
            偏远地区一般要多等几天，部分商品可能需要补一点运费。
            ? 加急配送值得吗？
            订单满一定金额就包邮，加急配送需要另付一点运费。
            如果是送礼或者有明确的截止日期，加急还是挺划算的。
            ? 快递来的时候我不在家怎么办？
            快递员一般会先打电话，联系不上的话第二天会再送一次。
            如果三次都没送成，包裹会在当地网点保留七天。
            白天不方便收件的话，下单时可以选择送到附近的快递柜或驿站。

            所有支付都走加密通道，我们不会保存完整的卡号。
            ? 可以用{payment}付款吗？
            可以的，我们支持{payment}，也支持银行卡和信用卡。
            在结算页面最后一步选择就行。
            ? 一笔订单能分两张卡付吗？
            目前一笔订单还不能拆成两张卡支付。
            不过礼品卡可以和银行卡一起用。
            ? 还没发货怎么就扣款了？
            下单后显示的是预授权冻结，真正扣款是在包裹出库的时候。
            如果订单取消了，冻结的金额一般几天内就会自动解冻。
            如果银行拦截了这笔支付，在手机银行里确认一下，通常几分钟就好。

            为了账户安全，修改重要信息时我们都会发短信确认。
            经常网购的话，建议打开登录保护，会更安心一些。
            ? 账号绑定的手机号怎么换？
            在“账户设置”里就能更换手机号，需要新旧号码各验证一次。
            如果旧手机号已经停用了，我们可以通过其他方式帮您核实身份。
            ? 密码忘了怎么办？
            登录页点“忘记密码”，按短信验证码重新设置就可以了，验证码十分钟内有效。
            如果收不到短信，可以稍等一分钟后重新获取。
            ? 可以保存两个收货地址吗？
            收货地址可以保存好几个，下单时选一个就行。
            还可以把最常用的那个设成默认地址。

            会员还能提前购买一些限量款。
            ? 两张优惠券能一起用吗？
            每笔订单只能用一张优惠券，不过积分可以叠加抵扣。
            第三方平台发的券有时候有单独的使用条件，用之前最好看清楚说明。
            ? 会员积分是怎么算的？
            每消费一元积一分，结算时可以直接抵现。
            如果账户连续十二个月没有消费，积分会自动清零。
            ? {season}会有活动吗？
            {season}一般都会有大促，关注店铺的会员能最早收到通知。
            具体时间一般会提前一周左右公布。

            大部分商品都附有保养说明，可以照着上面的建议来。
            平时顺手保养一下，比隔很久才大扫除一次要管用得多。
            ? {material}的东西平时怎么清洁比较好？
            {material}的东西用软布蘸一点温和的清洁剂擦一擦就够了。
            尽量别用太刺激的清洁剂，时间长了表面会变得暗淡。
            洗完一定要彻底晾干再收起来。
            ? {material}制品不用的时候怎么收纳？
            {material}制品最好放在阴凉干燥的柜子里。
            别让阳光直射，也别塞得太满，留点空间透气。

            选了礼品包装的订单，出库可能会晚一天。
            ? 你们可以帮忙包装成礼物吗？
            大部分商品都可以选礼品包装，在购物车里勾选就行。
            包装纸有环保纸和可重复使用的布包两种可选。
            ? 能直接寄给朋友当礼物吗？
            可以的，下单时填朋友的地址，还能附上一段祝福语。
            收到礼物的人不需要小票也能申请换货。
            ? 发货单上能不显示价格吗？
            礼品订单的发货单上不会显示任何价格。
            下单时勾选“礼品订单”，价格就会自动隐藏。
        """),
        ["好问题。", "我来给您解释一下。", "谢谢您的提问。", "这个我来说明一下。"],
        {
            "days": ["7", "15", "30"],
            "n": ["3", "5", "7"],
            "region": _split("新疆、西藏、香港、海南、内蒙古"),
            "payment": _split("微信支付、支付宝、云闪付、花呗"),
            "season": _split("双十一、年货节、618、开学季"),
            "material": _split("铸铁、亚麻、羊毛、竹子、陶瓷、不锈钢"),
        },
    ),
)
