"""The English texts of the ``manual`` scenario."""

from __future__ import annotations

from ctxwindow.eval.builtin._text import _lines, _split, _talk, _topics
from ctxwindow.eval.builtin.manual_text import _ManualText, _section

_MANUAL_EN = _ManualText(
    system="You are a helpful assistant. When the user shares a document, answer questions "
    "about it accurately and say so when the document does not cover something.",
    products=[
        ("Aeris P7", "portable air purifier", "filter cartridge"),
        ("Tidybot S3", "robot vacuum", "side brush"),
        ("Whisk V8", "cordless stick vacuum", "dust filter"),
        ("Brio Sonic 5", "smart toothbrush", "brush head"),
        ("Blendr Go", "portable blender", "blade gasket"),
    ],
    buttons=_split("Power, Mode, Home, Timer, Boost, Light"),
    meanings=_lines("""
        the battery is too hot
        the motor is blocked
        a sensor needs cleaning
        the {part} is missing or not seated correctly
        the last firmware update did not finish
        the charging contacts are dirty
        the battery voltage is too low
        the device has tipped over
    """),
    formats={
        "temp": "{} °C",
        "hours": "{} hours",
        "reset": "hold the {b1} and {b2} buttons together for {secs} seconds",
        "interval": "every {} weeks",
        "months": "{} months",
        "phone": "1-800-###-####",
    },
    title="# {name} {kind}: User Manual (model {model})",
    sections=[
        _section(
            "About this manual",
            """
            This manual covers the {name} {kind}, model {model}.
            Read it completely before first use and keep it for future reference.
            The box contains the main unit, a USB-C charging cable, a quick-start card and a spare
              {part}.
            Check that nothing is missing or damaged before you throw the packaging away.
            Keep the original box for the first month; it is the safest way to send the unit in for
              service.
            Illustrations may differ slightly from your unit depending on colour and market.
            Accessories sold separately are listed on our website with the models they fit.
            Words in bold refer to buttons or labels printed on the device.
            """,
        ),
        _section(
            "Safety instructions",
            """
            Use and charge the device only at room temperatures between {tmin} and {tmax}.
            Do not use the device if the cable or the plug is damaged.
            Keep the device away from open flames, heaters and direct sunlight.
            Children may use the device only under adult supervision.
            Never immerse the main unit in water or any other liquid.
            Do not open the housing; there are no user-serviceable parts inside.
            Use only the supplied cable or an approved replacement to charge the device.
            Stop using the device immediately if it smells of burning or makes a crackling sound.
            """,
        ),
        _section(
            "Product overview",
            """
            The {name} consists of the main unit, the charging cable and a removable {part}.
            The ring light on the front shows the operating status at a glance.
            The {b1} and {b2} buttons sit on the top of the unit, within easy reach.
            The charging port is on the back and is protected by a rubber cover.
            The serial number is printed on a label on the bottom of the unit.
            Do not remove this label; it is needed for warranty claims.
            """,
        ),
        _section(
            "Getting started",
            """
            Follow these steps the first time you use the {name}.
            Setup takes about ten minutes, most of it for the first charge.
            """,
            """
            1. Unpack the device and remove all protective film.
            2. Fit the {part} until it clicks into place.
            3. Connect the charging cable and charge the battery fully.
            4. Press the {b1} button to switch the device on.
            5. Install the app and pair the device (see Pairing with the app).
            6. Choose a mode with the {b2} button or in the app.
            """,
        ),
        _section(
            "Charging and battery",
            """
            The built-in lithium-ion battery has a capacity of {mah}, and a full charge takes about
              {charge}.
            Charge the battery fully before the first use.
            The indicator pulses while charging and stays on when the battery is full.
            Battery life depends on the selected mode and on the room temperature.
            If you will not use the device for several weeks, store it about half charged.
            It is normal for the device to become slightly warm while charging.
            The battery is not user-replaceable; an authorised service centre can replace it.
            Avoid leaving the device on the charger in a hot car or next to a radiator.
            """,
        ),
        _section(
            "Controls and indicators",
            """
            The {b1} button switches the device on and off, and the {b2} button cycles through the
              operating modes.
            A short press on any button wakes the device from standby.
            The ring light is white during normal operation, amber while charging and red when there
              is an error.
            Press and hold the {b2} button for two seconds to lock the controls.
            Every button gives a short beep, which you can turn off in the app.
            The display dims automatically after one minute without input.
            A slowly blinking light means the device is waiting to be paired.
            """,
        ),
        _section(
            "Pairing with the app",
            """
            To pair the device with the app, turn on Bluetooth on your phone, open the app and enter
              the default pairing PIN {pin} when asked.
            The app is available for iOS and Android.
            Pairing is needed only once; the device reconnects automatically afterwards.
            Keep the phone within two metres of the device while pairing.
            You can change the PIN in the app settings after the first connection.
            Firmware updates are delivered through the app and take a few minutes.
            Up to three phones can be paired with the same device.
            """,
        ),
        _section(
            "Everyday use",
            """
            Auto mode adjusts the power level to the conditions the device detects.
            Place the device on a flat, stable surface before switching it on.
            Night mode dims the light and lowers the noise for use in bedrooms.
            Eco mode extends battery life at the cost of some performance.
            You can set a schedule in the app so the device starts on its own.
            Switch the device off and let it cool down after long sessions.
            The app shows the usage history of the last thirty days.
            """,
        ),
        _section(
            "Modes in detail",
            """
            The {name} has four modes: auto, eco, night and boost.
            Auto mode is the best choice for everyday use and needs no adjustment.
            Eco mode reduces power to make the battery last longer.
            Night mode keeps the light dim and the noise low.
            Boost mode runs at full power for ten minutes and then returns to the previous mode.
            The selected mode is remembered when you switch the device off.
            """,
        ),
        _section(
            "Schedules and automation",
            """
            In the app you can create up to five schedules, each with its own mode and duration.
            Schedules run even when your phone is out of range, because they are stored on the
              device.
            A schedule can repeat on selected weekdays or run once.
            If two schedules overlap, the one that started later takes priority.
            You can pause all schedules at once from the app's home screen, for example when you go
              on holiday.
            """,
        ),
        _section(
            "Firmware updates",
            """
            The app checks for new firmware every time it connects to the device.
            Updates are optional, but we recommend installing them for the latest fixes.
            Keep the device charging and the phone nearby until the update is complete.
            The ring light blinks slowly during the update; do not press any buttons.
            If an update is interrupted, the device restarts with the previous version and you can
              try again.
            """,
        ),
        _section(
            "Cleaning and maintenance",
            """
            Replace the {part} {interval} of normal use; a worn {part} noticeably reduces
              performance.
            Wipe the housing with a soft, dry cloth once a week.
            Do not use solvents, alcohol or abrasive cleaners on any part of the device.
            If the {part} looks dirty, rinse it under lukewarm water and let it dry completely
              before refitting it.
            Replacement parts can be ordered in the app or from authorised dealers.
            Check the air vents regularly and remove any dust or hair.
            The app reminds you when the {part} is due for replacement.
            """,
        ),
        _section(
            "Storage and transport",
            """
            Switch the device off and let it cool down before storing it.
            Store it in a dry place, away from direct sunlight and out of reach of children.
            For longer storage, charge the battery to about half and recharge it every three months.
            Use the original box or a padded bag when you carry the device.
            Do not leave the device in a car on hot or freezing days.
            """,
        ),
        _section(
            "Accessories",
            """
            The following accessories are available for the {name}.
            Accessories are sold separately and may not be available in every country.
            Only use accessories made for this model.
            """,
            """
            - Spare {part} (pack of two)
            - Charging stand with indicator light
            - Padded travel case
            - Wall mount kit
            - Extra USB-C cable, 1.5 m
            """,
        ),
        _section(
            "Troubleshooting and error codes",
            """
            When an error code appears, switch the device off, wait ten seconds and switch it on
              again.
            If the device does not turn on, charge it for at least thirty minutes and try again.
            If the app cannot find the device, restart Bluetooth on your phone.
            Unusual noises often mean that something is stuck in an opening.
            If a problem persists after a restart, note the error code before contacting support.
            The display and the app show the following codes.
            """,
            "{codes}",
        ),
        _section(
            "Factory reset",
            """
            To restore the factory settings, {reset}; the ring light flashes three times when the
              reset is complete.
            A factory reset erases schedules, paired phones and all custom settings.
            Use the reset only when the troubleshooting steps do not help.
            After a reset, pair the device with the app again as described under Pairing with the
              app.
            Firmware updates are kept after a factory reset.
            Do not switch the device off while the reset is in progress.
            """,
        ),
        _section(
            "Technical specifications",
            """
            Specifications may change without notice as part of product improvements.
            Noise levels are measured at a distance of one metre in a quiet room.
            Battery runtime is measured in eco mode at room temperature.
            Weights are given without accessories.
            """,
            """
            - Model: {model}
            - Weight: {kg}
            - Maximum noise level: {db}
            - Battery: {mah}, lithium-ion
            - Charging input: 5 V, 3 A (USB-C)
            - Wireless: Bluetooth 5.2
            - Operating humidity: 20–80 % (non-condensing)
            """,
        ),
        _section(
            "Warranty",
            """
            The {name} is covered by a warranty of {months} from the date of purchase.
            Keep your receipt or invoice; it is required for any warranty claim.
            The warranty covers defects in materials and workmanship under normal use.
            Damage caused by accidents, misuse, liquids or unauthorised repairs is not covered.
            Consumable parts such as the {part} are not covered by the warranty.
            Repairs under warranty do not extend the original warranty period.
            Your statutory rights as a consumer are not affected by this warranty.
            """,
        ),
        _section(
            "Regulatory and environmental information",
            """
            This product complies with the applicable safety and radio equipment regulations.
            The full declaration of conformity is available on our website.
            The built-in battery contains materials that must be recycled separately.
            The packaging is made of recyclable cardboard; please sort it accordingly.
            Changes or modifications not approved by the manufacturer may void your right to use the
              device.
            """,
        ),
        _section(
            "Customer support",
            """
            Our customer support hotline is {phone}, open Monday to Friday from 9:00 to 18:00.
            Have the model number and, if possible, the serial number ready when you call.
            You can also reach us through the contact form in the app.
            Take the device to an electronics collection point at the end of its life; do not throw
              it away with household waste.
            Our website has video guides for the most common questions.
            """,
        ),
    ],
    padding=_lines("""
        Follow the steps in the order given.
        If in doubt, contact customer support before continuing.
        Actual performance may vary with room size and usage.
        The manufacturer is not liable for damage caused by ignoring these instructions.
        Note: keep the device out of reach of pets when it is not in use.
        Tip: the quick-start card in the box summarises the most important steps.
        Always switch the device off before moving it.
        Let the device reach room temperature before use if it has been stored in the cold.
        Do not cover the device while it is running.
        Only use spare parts and accessories recommended by the manufacturer.
        Keep the firmware up to date for the best performance and safety.
        Make sure the device is completely dry before charging it.
        Store the device in a dry place when it is not in use.
        Note: the indicator colours are explained under Controls and indicators.
        Tip: most settings can also be changed in the app.
        Never force a part into place; it should click in easily.
        Read the safety instructions again if you lend the device to someone else.
        Check the device for visible damage after a fall.
        Do not place heavy objects on top of the device.
        Make sure any openings are free of dust, hair and fluff.
    """),
    faq=("Frequently asked questions", "Q: {ask}\nA: {answer}"),
    paste=[
        "Here's the manual for my new {kind}. I'll paste the whole thing so you can refer to it "
        "later:\n\n{manual}",
        "I just got a {name} and the manual is long, so here it is in full. Please keep it in "
        "mind for my questions:\n\n{manual}",
    ],
    acks=_lines("""
        Thanks, I've read through the whole manual. Ask me anything about the {name} whenever you
          like.
        Got it, I've gone through every section. What would you like to know first?
    """),
    own_facts={
        "store": (
            "By the way, I bought mine at {store}, in case that matters for the warranty.",
            "Where did I say I bought my {name}?",
        ),
        "serial": (
            "The serial number on the bottom of my unit is {serial}, if you ever need it.",
            "What is the serial number of my unit?",
        ),
        "nickname": (
            "My kids have named it {nickname}, so don't be surprised if I call it that.",
            "What nickname did my kids give the {name}?",
        ),
    },
    own_acks=_lines("""
        Noted, thanks. Keep your receipt handy as well.
        Thanks for telling me, I'll keep that in mind.
        Good to know!
    """),
    own_values={
        "store": _split("Harbor Electronics, Techno Depot, GadgetNest, the Brightmart on Elm Road"),
        "serial": _split("SN4K7-22918, QX19-0384-77, B7T-556120, HP-20931-K"),
        "nickname": _split("Captain Breeze, Mister Hum, Dusty, Little Robin"),
    },
    questions={
        "reset": "How do I do a factory reset on the {name}?",
        "months": "How long is the warranty on the {name}?",
        "mah": "What is the battery capacity of the {name}?",
        "charge": "How long does a full charge take, according to the manual?",
        "interval": "How often should I replace the {part}?",
        "meaning": "What does error code {code} mean?",
        "pin": "What is the default pairing PIN for the app?",
        "tmax": "What is the highest room temperature the {name} may be used at?",
        "phone": "What is the customer support hotline number in the manual?",
        "db": "How loud is the {name} at most, according to the specifications?",
    },
    talk=_talk(
        "en",
        _topics("""
            Keep it away from radiators and sunny windowsills.
            ? Where's the best place to put it?
            A flat, open spot usually works best.
            Leave a little space around it so air can move freely.
            Corners tend to collect dust, so a more central spot is better.
            Near a socket is convenient if you charge it often.
            ? Does it matter if it sits on a {surface}?
            A {surface} is fine as long as the device stands steadily.
            If it wobbles at all, a small tray or board underneath solves the problem.

            Switch it off and unplug it before you clean anything.
            ? How should I clean the outside?
            A soft, dry cloth is the safest choice for the housing.
            A slightly damp cloth is fine for stubborn marks, as long as no water gets inside.
            A soft brush is handy for the gaps around the buttons.
            ? Is it okay to use wet wipes on it?
            I'd avoid them: wet wipes often contain alcohol, which can dull the finish over time.
            A cloth with a drop of water does the same job more safely.

            ? Can I leave it running overnight?
            Yes, that's fine as long as the vents are not covered.
            Night mode is designed for exactly that: it dims the light and keeps the noise down.
            Scheduling it to stop after a few hours is a good compromise.
            ? Is it loud enough to wake a light sleeper?
            In night mode it is very quiet, and most people stop noticing the sound after a few
              minutes.
            If you are sensitive to noise, try it for an evening before relying on it.

            Everything essential also works with the buttons on the device.
            ? What can the app actually do?
            The app lets you switch modes, set schedules and see the usage history.
            It also tells you when a part needs replacing and installs firmware updates.
            Notifications can be switched off if you find them annoying.
            ? Do I need an account to use the app?
            An account is only needed if you want to control it away from home.
            At home, a direct Bluetooth connection is enough.

            Keep the cable out of reach so nobody trips over it or chews it.
            A stable spot matters more than anything else with kids and pets around.
            ? Is it safe around small kids?
            It is best to let children use it only with an adult nearby.
            The control lock is useful if little hands like pressing buttons.
            ? My {pet} keeps sniffing at it, is that a problem?
            Not really; animals are usually curious at first and lose interest after a day or two.

            Switch it off completely before packing it.
            ? Can I take it with me when I travel?
            Yes, and a padded bag protects it well in a suitcase.
            If you fly, check the airline's rules for devices with built-in batteries.
            Hotel rooms can be dry or dusty, so it may need cleaning after a trip.
            ? Will it charge from a power bank?
            Most USB-C power banks can charge it, although more slowly than the wall adapter.

            ? Do firmware updates change anything important?
            Updates usually fix small bugs and sometimes improve battery management.
            It's worth installing them, ideally while the device is charging.
            ? Are third-party spare parts okay to use?
            Third-party parts may fit, but they can affect performance and the warranty.
            Original parts are designed for the exact dimensions of the device.
            If you try a third-party part, keep the original one in case of problems.
        """),
        ["Good question.", "Happy to help.", "That's a sensible thing to ask."],
        {
            "surface": _split("carpet, wooden floor, rug, glass shelf"),
            "pet": _split("cat, dog, puppy"),
        },
    ),
)
