"""The texts of the ``agent`` scenario, in English and Chinese."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ctxwindow.eval.builtin._text import _lines, _split


@dataclass(frozen=True)
class _AgentText:
    system: str
    tasks: Sequence[str]
    remarks: Mapping[str, Sequence[str]]  # deploy status -> remarks
    log_info: Sequence[str]
    log_warn: Sequence[str]
    log_error: str
    tickets: Sequence[str]
    people: Sequence[str]
    deploy_notes: Sequence[str]
    teams: Sequence[str]
    config_note: str
    notes: Sequence[str]
    interjections: Sequence[str]
    questions: Mapping[str, str]


_AGENT_EN = _AgentText(
    system="You are an SRE agent. Investigate with the tools you have, never restart or roll "
    "back anything without approval, and report what you find.",
    tasks=_lines("""
        The {service} deploy of {version} went out this morning and some users in {region} see
          errors. Please audit it: check the inventory, the logs and the metrics, and tell me what
          you find.
        We shipped {version} of {service} a few hours ago and the error budget in {region} is
          burning. Can you go through the fleet and figure out what's going on?
    """),
    remarks={
        "ok": _split("healthy, serving traffic, all checks green, warm and in rotation"),
        "pending": _split("waiting for a rollout slot, queued behind the canary"),
        "draining": _split("being drained for maintenance, out of rotation for a kernel patch"),
        "failed": _split("deploy failed and rolled back automatically, deploy failed"),
    },
    log_info=_lines("""
        pulling image {image}:{version}
        health check passed in {ms} ms
        registered with load balancer {lb}
        configuration reloaded
        warming cache: {n} keys loaded
        connection pool ready with {n} connections
        GC pause of {ms} ms
        serving {n} requests per second
        feature flags refreshed
        upstream {dep} reachable, latency {ms} ms
    """),
    log_warn=_lines("""
        slow query on table {table}: {ms} ms
        retrying call to {dep} (attempt {k})
        request queue above {n} items
    """),
    log_error="deploy of {version} failed: {error}; rolling back to {previous}",
    tickets=_lines("""
        Latency spike on {service} in {region}
        Flaky integration test blocks the {service} pipeline
        Rotate TLS certificates for {service}
        Customer reports duplicate emails from {service}
        Disk usage above 85 % on {region} database replicas
        Upgrade base image for {service}
        Alert noise: CPU warnings in {region} during backups
        Add dashboards for {service} queue depth
        Investigate memory growth in {service}
        Runbook for {region} failover is out of date
    """),
    people=_split(
        "Maya Chen, Oliver Grant, Ines Duarte, Rahul Mehta, Lena Novak, Samuel Adeyemi, "
        "Yuki Tanaka, Chloe Martin"
    ),
    deploy_notes=_split(
        "routine release, dependency bumps, hotfix for timeouts, config-only change, "
        "canary promoted, rolled back after alerts"
    ),
    teams=_split("payments platform, search infrastructure, core services, growth engineering"),
    config_note="managed by the deploy pipeline; edit through a pull request",
    notes=_lines("""
        Got the results; nothing here changes the plan yet.
        I'll compare these numbers with last week's baseline before drawing conclusions.
        This batch looks consistent with the earlier readings.
        Next I'll widen the search a little to rule out a regional issue.
        The data is noisy, so I'm looking at trends rather than single points.
        I'm noting this down for the final summary.
        No action is needed on this part for now; moving on.
        Let me cross-check this against the deploy history.
        These values are within the normal range for this time of day.
        I'll keep the rollback option in mind while I continue.
        Nothing here needs your approval yet.
        I want one more data point before I call this a pattern.
    """),
    interjections=_lines("""
        Any progress so far?
        Also keep an eye on {region}, we had alerts there last week.
        Take your time, just don't restart anything without asking me.
        The team lead is asking for an ETA. Roughly how long?
        Can you also glance at the deploy history when you get a chance?
    """),
    questions={
        "host": "Which host had the failed deploy in the first inventory lookup?",
        "zone": "In the first inventory lookup, which availability zone was the failed host in?",
        "error": "What error code did the logs of {host} show for the failed deploy?",
        "latency": "In the first latency query, what was the peak p99 latency in {region} (ms)?",
        "ticket": "Who is assigned to the P1 ticket in the list of open tickets?",
        "pool": "What database pool size does the {service} config set?",
    },
)

_AGENT_ZH = _AgentText(
    system="你是一名 SRE 运维助手。请使用现有工具排查问题，未经批准不要重启或回滚任何服务，"
    "并汇报你的发现。",
    tasks=_lines("""
        今天早上 {service} 发布了 {version}，{region} 有用户反馈报错。麻烦你排查一下：
          看看主机清单、日志和监控指标，然后告诉我结论。
        {service} 的 {version} 几个小时前上线了，{region} 的错误预算一直在掉。
          你把机器都过一遍，看看到底是怎么回事？
    """),
    remarks={
        "ok": _split("运行正常、正常接流量、各项检查通过、已预热并在线服务"),
        "pending": _split("等待发布窗口、排在金丝雀之后"),
        "draining": _split("正在摘流维护、内核补丁升级，暂时下线"),
        "failed": _split("部署失败，已自动回滚、部署失败，已摘除流量"),
    },
    log_info=_lines("""
        开始拉取镜像 {image}:{version}
        健康检查通过，耗时 {ms} ms
        已注册到负载均衡 {lb}
        配置已重新加载
        缓存预热完成，共加载 {n} 个键
        连接池就绪，共 {n} 个连接
        GC 暂停 {ms} ms
        当前每秒处理 {n} 个请求
        功能开关已刷新
        上游 {dep} 可达，延迟 {ms} ms
    """),
    log_warn=_lines("""
        表 {table} 出现慢查询，耗时 {ms} ms
        调用 {dep} 失败，正在重试（第 {k} 次）
        请求队列超过 {n} 条
    """),
    log_error="{version} 部署失败：{error}，正在回滚到 {previous}",
    tickets=_lines("""
        {region} 的 {service} 延迟突增
        集成测试不稳定，卡住了 {service} 的流水线
        更新 {service} 的 TLS 证书
        用户反馈 {service} 重复发送邮件
        {region} 数据库从库磁盘使用率超过 85%
        升级 {service} 的基础镜像
        {region} 备份期间 CPU 告警过多
        为 {service} 增加队列深度监控面板
        排查 {service} 内存持续增长
        {region} 故障切换手册内容过时
    """),
    people=_split("王磊、李静、张伟、刘洋、陈晨、杨帆、赵敏、孙浩"),
    deploy_notes=_split(
        "常规发布、依赖升级、修复超时问题的热补丁、仅配置变更、金丝雀全量、告警后回滚"
    ),
    teams=_split("支付平台组、搜索基础设施组、核心服务组、增长技术组"),
    config_note="由发布流水线管理，如需修改请提交合并请求",
    notes=_lines("""
        结果拿到了，目前还不需要调整排查思路。
        下结论之前，我先和上周的基线数据对比一下。
        这一批数据和前面看到的基本一致。
        接下来我把范围再扩大一点，排除是地域性的问题。
        数据波动比较大，我主要看趋势，不看单个点。
        这一点我先记下来，最后汇总时一起说明。
        这部分暂时不需要处理，继续往下查。
        我再拿发布记录交叉核对一下。
        这些数值在这个时段属于正常范围。
        继续排查的同时，我会把回滚作为备选方案。
        目前还没有需要您审批的操作。
        我想再多看一个数据点，再判断这是不是规律。
    """),
    interjections=_lines("""
        现在进展怎么样了？
        顺便也盯一下 {region}，上周那边报过警。
        不着急，但是重启任何东西之前先问我一声。
        组长在问大概什么时候能有结论？
        有空的话也看一眼发布记录吧。
    """),
    questions={
        "host": "第一次查询主机清单时，哪台主机部署失败了？",
        "zone": "第一次查主机清单时，部署失败的那台主机在哪个可用区？",
        "error": "{host} 的日志里，部署失败时报的错误码是什么？",
        "latency": "第一次查询延迟指标时，{region} 的 p99 延迟峰值是多少毫秒？",
        "ticket": "未关闭工单列表里，那张 P1 工单分配给了谁？",
        "pool": "{service} 的配置里，数据库连接池大小设置的是多少？",
    },
)
