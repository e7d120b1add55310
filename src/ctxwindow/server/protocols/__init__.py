"""The wire formats the service speaks, one ``Adapter`` each over the one exchange.

- ``chat``: OpenAI Chat Completions (``ChatCompletions``, ``StreamedReply``);
- ``responses``: the OpenAI Responses API (``Responses``, ``ResponsesStream``), with
  ``response_ids`` (response ids and the session a request names) and ``items``
  (Responses items to and from chat messages);
- ``anthropic``: Anthropic Messages (``AnthropicMessages``, ``MessagesStream``), with
  ``blocks`` (Anthropic blocks to and from chat messages);
- ``base``: the ``Adapter`` contract; ``wire``: what the converters share.

Sessions keep OpenAI chat messages whatever the protocol: a request's new
turns are converted to them before they are stored, and a built context back
to the request's protocol before it goes upstream.
"""
